// Helpers of the layer-module tests (engine/backend/layer_modules.h; test_{cpu,vulkan,cuda}_modules,
// test_layer_modules): the message of a BackendFailure, and a generated model to give schedules no
// Jamba config gives. Header-only, no device needed.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "engine/backend/backend.h"
#include "engine/model/generator.h"
#include "engine/model/loader.h"

namespace hl::backend_test {

// The message of the BackendFailure `f` throws, or "(no BackendFailure)".
inline std::string backend_failure_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const BackendFailure& e) {
    return e.what();
  }
  return "(no BackendFailure)";
}

// The demo-random preset (8 layers, attention in 2, MoE in every other one) generated into `dir` and
// loaded as a mutable Model, for tests that give it a schedule no Jamba config gives.
inline std::shared_ptr<Model> generated_demo_model(const std::string& dir, uint64_t seed, DType dtype) {
  GenerateOptions g;
  g.config = preset_config("demo-random");
  g.seed = seed;
  g.dtype = dtype;
  generate_checkpoint(dir, g);
  return std::make_shared<Model>(*load_model(dir));
}

}  // namespace hl::backend_test
