// A generated checkpoint wide enough for ggml's 256-value K-quant blocks: the tiny config (every layer
// kind: Mamba, attention, dense and MoE feed-forwards) at hidden size 256, used by the quantised-weight
// tests (test_quantized_weights.cpp, block_weights_test_util.h).
#pragma once
#include <cstdint>

#include "engine/model/generator.h"
#include "tests/engine/test_util.h"

namespace hl::test {

struct BlockModel {
  TempDir dir;
  explicit BlockModel(uint64_t seed = 5) {
    GenerateOptions o;
    o.config = tiny_config();
    o.config.hidden_size = 256;
    o.config.intermediate_size = 512;
    o.config.vocab_size = 96;
    o.seed = seed;
    generate_checkpoint(dir.path, o);
  }
};

}  // namespace hl::test
