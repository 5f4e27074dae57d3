// Helpers of the Vulkan backend tests (test_vulkan*.cpp): the device backend helpers shared with
// the CUDA tests (backend_test_util.h) and whether a Vulkan device exists (lavapipe counts).
#pragma once
#include "engine/backend/vulkan/vulkan_backend.h"
#include "tests/engine/backend_test_util.h"

namespace hl::vktest {

inline bool have_vulkan() {
  return vulkan_available(false);
}

}  // namespace hl::vktest
