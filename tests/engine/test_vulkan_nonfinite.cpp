// The final norm and LM head non-finite flags (issue 18 item 7) on the Vulkan backend: the same
// cases as the CPU (nonfinite_test_util.h); lavapipe counts as a device. Only in hl_vulkan_tests.
#ifdef HL_VULKAN_TESTS
#include <gtest/gtest.h>

#include "tests/engine/nonfinite_test_util.h"
#include "tests/engine/vulkan_test_util.h"

TEST(VulkanNonFinite, FinalNormIsL_LmHeadIsLPlusOne_AsTheCpu) {
  if (!hl::vktest::have_vulkan()) GTEST_SKIP() << "no Vulkan device";
  hl::nonfinite_test::expect_head_flags("vulkan");
}
#endif
