// The one backend interface (DESIGN.md): a backend owns the inference state (KV cache, conv and
// SSM states, instrument accumulators) of one run of one model and turns tokens into TokenTraces.
// The CPU backend is the reference; GPU backends are checked against it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/model/token_trace.h"
#include "engine/model/weights.h"

namespace hl {

// A backend that cannot go on: no usable device, not enough device memory, a lost device, a
// failed submission. The backend is unusable after it (every later call throws it again); the
// model and the caller's records are untouched, so the caller can rebuild the run on the CPU
// (make_backend("cpu", model)) from the tokens it already has. Plain Error stays for bad input.
class BackendFailure : public Error {
 public:
  using Error::Error;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Clears the state and feeds the registers (trace-format.md §2). Throws Error on bad options.
  virtual void start(const RunOptions& opts) = 0;
  // Feeds S tokens after those already fed. S == 1 is a decode step; S > 1 is a prefill that
  // must agree with S decode steps to 1e-5 relative. Appends S records to `out`.
  virtual void forward(const int32_t* tokens, int64_t S, std::vector<TokenTrace>* out) = 0;
  // Tokens fed since start() (registers excluded).
  virtual int64_t position() const = 0;
  virtual const Model& model() const = 0;
  virtual const RunOptions& options() const = 0;
  // Registers in use in this run (trained first, then test-time).
  virtual int registers() const = 0;
};

// A backend of the registry (backend_registry.h): "cpu" (always), "vulkan", "cuda" when built;
// "auto" tries the natively available ones by rank (CUDA, then a Vulkan GPU, never a CPU-emulated
// Vulkan device such as lavapipe, then the CPU) and falls back to the next when one fails while
// being set up (not enough memory): `note`, when given, then receives one line saying why. A name
// not in this build throws Error listing those that are; a named backend that fails while being
// set up (no device) throws BackendFailure.
std::unique_ptr<Backend> make_backend(const std::string& which, std::shared_ptr<const Model> model,
                                      std::string* note = nullptr);
// The registered backends available here, in menu order ("cpu", and "vulkan" when built and any
// Vulkan device, lavapipe included, exists).
std::vector<std::string> available_backends();

}  // namespace hl
