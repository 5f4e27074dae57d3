// The final norm and LM head non-finite flags (issue 18 item 7) on the CUDA backend: the same cases
// as the CPU (nonfinite_test_util.h). Only in hl_cuda_tests; skips without a CUDA device.
#ifdef HL_CUDA_TESTS
#include <gtest/gtest.h>

#include "engine/backend/cuda/cuda_backend.h"
#include "tests/engine/nonfinite_test_util.h"

TEST(CudaNonFinite, FinalNormIsL_LmHeadIsLPlusOne_AsTheCpu) {
  if (!hl::cuda_available()) GTEST_SKIP() << "no CUDA device: " << hl::cuda_unavailable_reason();
  hl::nonfinite_test::expect_head_flags("cuda");
}
#endif
