// Test hook of the Vulkan backend: runs one compute kernel (shaders/*.comp) once on the process's
// Vulkan context with host arrays as its bindings and reads every binding back, so that a test can
// check one kernel against the reference functions (tests/engine/test_backend_kernels.cpp). Not used
// by the backend itself (vk_record.cpp records whole blocks); slow by design (one submission per call).
#pragma once
#include <cstdint>
#include <vector>

#include "engine/backend/vulkan/vk_kernels.h"

namespace hl::vk {

struct KernelCall {
  Kernel kernel = Kernel::RmsNorm;
  uint32_t dtype = 0;                         // specialization constant 0 (DT_F32, DT_F16, DT_BF16)
  std::vector<uint32_t> bind[kBindingCount];  // 32-bit words of each binding; empty: a placeholder
  std::vector<uint8_t> push;                  // push constants (the kernel's *PC struct)
  uint32_t gx = 1, gy = 1, gz = 1;            // workgroups
};

// Runs c.kernel on the context of Context::get(false) (lavapipe counts) and writes the bindings back
// into c.bind. Throws BackendFailure when no device exists or the device fails.
void run_kernel(KernelCall& c);

// The push constants of a *PC struct as bytes.
template <class PC>
std::vector<uint8_t> push_bytes(const PC& pc) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(&pc);
  return std::vector<uint8_t>(p, p + sizeof(PC));
}

}  // namespace hl::vk
