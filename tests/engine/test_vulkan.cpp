// The Vulkan backend through the one device-backend test body (backend_suite.h): against the CPU
// backend, the golden reference traces and the reference forward on every golden checkpoint and run
// (decode, prefill, the normalizers, registers), instruments off, restarts, the context limit, a lost
// device, the command line and the non-finite flags. Built only into hl_vulkan_tests (label vulkan,
// HL_VULKAN_TESTS defined; test_vulkan_runs.cpp has the Vulkan-only checks, test_vulkan_kernels.cpp
// the kernels one by one); skips where no Vulkan device exists.

// Tolerances: as stated in backend_test_util.h (kVsCpu, kVsGolden, kPrefillVsDecode, shared with
// the CUDA tests), and one of the Vulkan backend's own:
//   F32 matrices stored as F16 (VulkanOptions::f32_as_f16), logits vs CPU: |Δ| ≤ 2e-2·scale, same argmax
#ifdef HL_VULKAN_TESTS
#include <gtest/gtest.h>

#include "tests/engine/backend_suite.h"
#include "tests/engine/vulkan_test_util.h"

using namespace hl;
using namespace hl::backend_test;
using namespace hl::vktest;

namespace {

const auto* const g_keep = ::testing::AddGlobalTestEnvironment(
    new KeepDevice(have_vulkan, [](std::shared_ptr<const Model> m) { return make_vulkan_backend(std::move(m)); }));

}  // namespace

// The whole-model body shared with the CUDA backend (backend_suite.h), on Vulkan.
INSTANTIATE_TEST_SUITE_P(Vulkan, BackendGolden, ::testing::ValuesIn(golden_on("vulkan")), golden_on_name);
INSTANTIATE_TEST_SUITE_P(Vulkan, DeviceBackend,
                         ::testing::Values(DeviceBackendParam{"vulkan", [] { vulkan_simulate_device_loss(0); }}),
                         [](const auto&) { return std::string("vulkan"); });

#endif  // HL_VULKAN_TESTS
