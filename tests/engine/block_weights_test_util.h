// Weights in ggml's block formats on a device backend (quantise on load, GGUF): a 256-wide generated
// model of every layer kind, its embedding in blocks as GGUF files have it, and the body shared by the
// device backends (backend_suite.h): every format a device kernel reads, decode and prefill, matches
// the CPU backend on the same blocks to kVsCpu (both dequantise exactly as ggml does, so only the
// fp32 summation order differs), and a block type no kernel reads is widened exactly.
#pragma once
#include <cmath>
#include <random>

#include "engine/core/ggml_quant.h"
#include "engine/model/quantize.h"
#include "tests/engine/backend_test_util.h"
#include "tests/engine/block_model_util.h"

namespace hl::backend_test {

using test::BlockModel;

// A copy of `m` whose token embedding (and the head, when tied) is held as `bytes` in `fmt`.
inline std::shared_ptr<const Model> with_embedding_blocks(const Model& m, DType fmt, std::vector<uint8_t> bytes) {
  auto c = std::make_shared<Model>(m);
  const bool tied = c->w.lm_head.data == c->w.embed.data;
  auto blocks = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  Mat& e = c->w.embed;
  EXPECT_EQ(static_cast<int64_t>(blocks->size()), e.rows * dtype_row_bytes(fmt, e.cols));
  e.dtype = fmt;
  e.data = blocks->data();
  c->keep_alive.push_back(blocks);
  if (tied) c->w.lm_head = e;
  return c;
}

// The embedding quantised to `fmt` by ggml's reference quantiser, as GGUF files hold it.
inline std::shared_ptr<const Model> with_block_embedding(const Model& m, DType fmt) {
  const Mat& e = m.w.embed;
  std::vector<float> wide(static_cast<size_t>(e.rows * e.cols));
  std::vector<uint8_t> plain;
  to_float(e.dtype, plain_rows(e, 0, e.rows, plain), wide.data(), wide.size());
  std::vector<uint8_t> blocks(static_cast<size_t>(e.rows * dtype_row_bytes(fmt, e.cols)));
  ggml_quantize_row(dtype_ggml_type(fmt), wide.data(), blocks.data(), e.rows * e.cols);
  return with_embedding_blocks(m, fmt, std::move(blocks));
}

// The embedding as random Q4_1 blocks (d, m as F16, 16 bytes of 4-bit codes; no reference quantiser).
inline std::shared_ptr<const Model> with_random_q4_1_embedding(const Model& m) {
  const Mat& e = m.w.embed;
  std::vector<uint8_t> blocks(static_cast<size_t>(e.rows * dtype_row_bytes(DType::Q4_1, e.cols)));
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> u(-0.05f, 0.05f);
  for (size_t b = 0; b < blocks.size(); b += 20) {
    const float dm[2] = {std::fabs(u(rng)) * 0.2f, u(rng)};
    from_float(DType::F16, dm, &blocks[b], 2);
    for (int j = 4; j < 20; ++j) blocks[b + j] = static_cast<uint8_t>(rng());
  }
  return with_embedding_blocks(m, DType::Q4_1, std::move(blocks));
}

// The formats the device kernels read, each quantised on load; Q8_0 and Q4_K with the embedding (and
// tied head) in blocks too. Decode and prefill against the CPU backend. Then a Q4_1 embedding (no
// device kernel reads Q4_1: widened exactly at upload).
inline void expect_block_weights_match_cpu(const std::string& backend) {
  BlockModel g;
  const std::shared_ptr<const Model> stored = load_model(g.dir.path);
  const std::vector<int32_t> ids = random_ids(19, stored->config.vocab_size, 3);  // > one 16-token tile
  RunOptions o;
  o.full = true;
  for (DType fmt : {DType::Q8_0, DType::Q4_K, DType::Q4_0, DType::Q5_0, DType::Q5_1, DType::Q5_K, DType::Q6_K}) {
    SCOPED_TRACE(dtype_name(fmt));
    LoadOptions lo;
    lo.weights = fmt;
    lo.fp32_activations = true;  // the devices multiply by x in fp32: the CPU's matching path
    std::shared_ptr<const Model> q = load_model(g.dir.path, lo);
    if (fmt == DType::Q8_0 || fmt == DType::Q4_K) q = with_block_embedding(*q, fmt);
    ASSERT_EQ(q->w.layers[0].mamba.in_proj.dtype, fmt);
    auto cpu = make_backend("cpu", q);
    const std::vector<TokenTrace> ref = run(*cpu, ids, o, false);
    auto dev = make_backend(backend, q);
    expect_traces_close(run(*dev, ids, o, false), ref, kVsCpu, backend + " decode " + dtype_name(fmt));
    auto devp = make_backend(backend, q);
    expect_traces_close(run(*devp, ids, o, true), ref, kVsCpu, backend + " prefill " + dtype_name(fmt));
  }
  const std::shared_ptr<const Model> q41 = with_random_q4_1_embedding(*stored);
  auto cpu = make_backend("cpu", q41);
  auto dev = make_backend(backend, q41);
  const std::vector<int32_t> few(ids.begin(), ids.begin() + 6);
  expect_traces_close(run(*dev, few, RunOptions{}, false), run(*cpu, few, RunOptions{}, false), kVsCpu,
                      backend + " Q4_1 embedding");
}

}  // namespace hl::backend_test
