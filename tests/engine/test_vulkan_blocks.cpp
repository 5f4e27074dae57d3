// The Vulkan backend's own checks on weights in ggml's block formats, beyond the shared body
// (backend_suite.h, block_weights_test_util.h: every format, decode and prefill, against the CPU):
// the other prefill product kernel than the device's choice, and that the device holds the blocks,
// not a widened copy. Built only into hl_vulkan_tests (HL_VULKAN_TESTS).
#ifdef HL_VULKAN_TESTS
#include <gtest/gtest.h>

#include "tests/engine/block_weights_test_util.h"
#include "tests/engine/vulkan_test_util.h"

using namespace hl;
using namespace hl::backend_test;
using namespace hl::vktest;

namespace {

class VulkanBlocks : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_vulkan()) GTEST_SKIP() << "no Vulkan device";
  }
};

}  // namespace

TEST_F(VulkanBlocks, BothPrefillProductKernels_ReadTheBlocks_MatchCpu) {
  BlockModel g;
  const std::vector<int32_t> ids = random_ids(19, 96, 4);
  RunOptions o;
  o.full = true;
  for (DType fmt : {DType::Q8_0, DType::Q4_K}) {
    SCOPED_TRACE(dtype_name(fmt));
    LoadOptions lo;
    lo.weights = fmt;
    lo.fp32_activations = true;  // the devices multiply by x in fp32: the CPU's matching path
    const std::shared_ptr<const Model> q = with_block_embedding(*load_model(g.dir.path, lo), fmt);
    auto cpu = make_backend("cpu", q);
    const std::vector<TokenTrace> ref = run(*cpu, ids, o, false);
    for (VulkanOptions::Matmul mm : {VulkanOptions::Matmul::Tiled, VulkanOptions::Matmul::Rows}) {
      VulkanOptions vo;
      vo.matmul = mm;
      auto vk = make_vulkan_backend(q, vo);
      expect_traces_close(run(*vk, ids, o, true), ref, kVsCpu,
                          std::string(mm == VulkanOptions::Matmul::Tiled ? "tiled " : "rows ") + dtype_name(fmt));
    }
  }
}

TEST_F(VulkanBlocks, TheDeviceHoldsTheBlocks_NotAWidenedCopy) {
  BlockModel g;
  LoadOptions lo;
  lo.weights = DType::Q4_K;
  const std::shared_ptr<const Model> q = load_model(g.dir.path, lo);
  ASSERT_TRUE(q->quantization);
  const WeightQuantization& wq = *q->quantization;
  // A device with room for the Q4_K matrices but not for them widened back to their stored size.
  const uint64_t limit = (wq.bytes_after + wq.bytes_before) / 2;
  ScopedEnv env("HL_VULKAN_MEMORY_LIMIT", std::to_string(limit));
  EXPECT_NO_THROW(make_vulkan_backend(q)) << "Q4_K weights should fit " << limit << " bytes";
  try {
    make_vulkan_backend(load_model(g.dir.path));
    FAIL() << "the as-stored weights should not fit " << limit << " bytes";
  } catch (const BackendFailure& e) {
    EXPECT_NE(std::string(e.what()).find("not enough device memory"), std::string::npos) << e.what();
  }
}

#endif  // HL_VULKAN_TESTS
