// Pipeline stages on the CUDA backend (issue 21 item 3, pipeline.h make_stage_backend): N stages in
// threads over the in-process StageLink, each on its own CUDA backend holding only its layers, give
// records equal bit for bit to one CUDA backend running the whole model (the residual rows cross
// the stages in float32 exactly; each stage computes its own layers' slots and residual points, the
// last one the logits) — decode steps (the CUDA graph), a prefill chunk, test-time registers with
// softmax-1, full traces; Jamba golden checkpoints (MoE, sharded; tied head) and the Bamba, Nemotron-H
// (with and without MoE) and Granite 4.0-H presets. A pipeline that mixes a CPU stage and a CUDA
// stage agrees with the CPU within the device tolerance (kVsCpu).
// Built only into hl_cuda_tests (HL_CUDA_TESTS); skips without a CUDA device.
#ifdef HL_CUDA_TESTS
#include <gtest/gtest.h>

#include "engine/backend/cuda/cuda_backend.h"
#include "tests/engine/backend_test_util.h"
#include "tests/engine/pipeline_test_util.h"

using namespace hl;
using namespace hl::pipeline_test;
using hl::backend_test::golden_case;

namespace {

const std::vector<int32_t> kIds = {1, 17, 40, 9, 33}, kChunk = {25, 12, 7, 90, 3, 64};

void expect_cuda_pipeline_equals_one_cuda(const std::string& dir, const RunOptions& opts, const std::vector<int>& ns) {
  std::unique_ptr<Backend> one = make_cuda_backend(load_model(dir));
  expect_pipeline_equals_one(*one, "cuda", dir, opts, ns, kIds, kChunk);
}

class CudaPipeline : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
  }
};

}  // namespace

TEST_F(CudaPipeline, RecordsEqualOneCudaBackend_JambaGoldenCases) {
  RunOptions opts;
  opts.full = true;  // attention rows, Δ and retained fractions merged too
  expect_cuda_pipeline_equals_one_cuda(golden_case("mixed_sharded"), opts, {2, 3});
  expect_cuda_pipeline_equals_one_cuda(golden_case("mqa_tied_bias"), opts, {2});  // tied head on the last stage
  opts.registers = 3;  // test-time registers cross the stages
  opts.normalizer = Normalizer::Softmax1;
  expect_cuda_pipeline_equals_one_cuda(golden_case("mixed_sharded"), opts, {3});
  RunOptions lean;
  lean.instruments = false;
  expect_cuda_pipeline_equals_one_cuda(golden_case("gqa_basic"), lean, {2});
}

TEST_F(CudaPipeline, RecordsEqualOneCudaBackend_OtherFamilies) {
  RunOptions opts;
  opts.full = true;
  for_each_family({"bamba-tiny", "nemotron-h-tiny", "nemotron-h-moe-tiny", "granite-h-tiny"},
                  [&](const std::string& dir) { expect_cuda_pipeline_equals_one_cuda(dir, opts, {2, 3}); });
}

TEST_F(CudaPipeline, MixedCpuAndCudaStages_MatchCpu) {
  expect_mixed_with_cpu_stage_matches_cpu("cuda", golden_case("mixed_sharded"), kIds, kChunk);
}

TEST_F(CudaPipeline, StageOfAnotherRange_Refused) {
  expect_stage_of_another_range_refused("cuda", golden_case("mixed_sharded"));
}

#endif  // HL_CUDA_TESTS
