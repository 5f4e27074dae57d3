// The non-finite flags of the final norm and the LM head (issue 18 item 7), checked the same way on
// every backend: a tiny checkpoint (4 layers, untied LM head) with one NaN or Inf placed in the final
// norm, the LM head or a layer; nonfinite_layer must be L, L + 1 or the layer, on decode and prefill.
// Used by test_nonfinite.cpp (CPU), the device-backend body backend_suite.h (Vulkan, CUDA) and the
// reference forward's test (test_reference_oracle.cpp).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/model/loader.h"
#include "tests/engine/test_util.h"

namespace hl::nonfinite_test {

using Edit = std::function<void(std::vector<test::TestTensor>&)>;

inline JambaConfig untied_tiny() {
  JambaConfig c = test::tiny_config();
  c.tie_word_embeddings = false;  // a separate lm_head.weight to poison
  return c;
}

// Tokens 1, 2, 3 of the tiny checkpoint edited by `edit` on `backend`: one decode step each, or one prefill.
inline std::vector<TokenTrace> run_tiny(const std::string& backend, const Edit& edit, bool prefill = false) {
  test::TempDir dir;
  test::write_tiny_checkpoint(dir.path, untied_tiny(), edit);
  auto model = load_model(dir.path);
  auto b = make_backend(backend, model);
  b->start(RunOptions{});
  std::vector<TokenTrace> recs;
  const std::vector<int32_t> ids = {1, 2, 3};
  if (prefill)
    b->forward(ids.data(), 3, &recs);
  else
    for (int32_t id : ids) b->forward(&id, 1, &recs);
  return recs;
}

inline Edit poison(const std::string& tensor, size_t index, float value) {
  return [=](std::vector<test::TestTensor>& ts) { test::find_tensor(ts, tensor)->values.at(index) = value; };
}

inline void expect_head_flags(const std::string& backend) {
  const int32_t L = static_cast<int32_t>(untied_tiny().num_hidden_layers);
  const float nan = std::nanf(""), inf = std::numeric_limits<float>::infinity();
  const int64_t H = untied_tiny().hidden_size;
  for (bool prefill : {false, true}) {
    const std::string how = backend + (prefill ? " prefill" : " decode");
    // Finite weights: −1, finite logits.
    for (const TokenTrace& r : run_tiny(backend, {}, prefill)) {
      EXPECT_EQ(r.nonfinite_layer, -1) << how;
      for (float v : r.logits) ASSERT_TRUE(std::isfinite(v)) << how;
    }
    // A NaN in the final norm weight: every layer's output finite, the norm's output not → L.
    for (const TokenTrace& r : run_tiny(backend, poison("model.final_layernorm.weight", 5, nan), prefill)) {
      EXPECT_EQ(r.nonfinite_layer, L) << how << ": final norm";
      EXPECT_TRUE(std::isnan(r.logits[0])) << how;
    }
    // A NaN in row 7 of the LM head: only logit 7 is NaN → L + 1.
    for (const TokenTrace& r : run_tiny(backend, poison("lm_head.weight", 7 * H + 3, nan), prefill)) {
      EXPECT_EQ(r.nonfinite_layer, L + 1) << how << ": LM head";
      EXPECT_TRUE(std::isnan(r.logits[7])) << how;
      EXPECT_TRUE(std::isfinite(r.logits[6])) << how;
    }
    // An Inf in row 9 of the LM head → L + 1 as well.
    for (const TokenTrace& r : run_tiny(backend, poison("lm_head.weight", 9 * H, inf), prefill))
      EXPECT_EQ(r.nonfinite_layer, L + 1) << how << ": LM head Inf";
    // A layer that goes non-finite first keeps its own index (the head's NaN comes after it).
    const Edit both = [&](std::vector<test::TestTensor>& ts) {
      poison("model.layers.1.input_layernorm.weight", 0, inf)(ts);
      poison("lm_head.weight", 0, nan)(ts);
    };
    for (const TokenTrace& r : run_tiny(backend, both, prefill)) EXPECT_EQ(r.nonfinite_layer, 1) << how;
  }
}

}  // namespace hl::nonfinite_test
