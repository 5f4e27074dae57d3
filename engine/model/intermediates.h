// The named intermediate tensors of one forward pass, defined once (as llama.cpp's cb(cur, "attn_norm", il)
// and ggml's eval callback): the table of names with their per-row shapes, and the observer a backend
// calls at those points. Not a trace field (those are in token_trace.h): intermediates are full rows,
// seen only when an observer is set (tests, debugging); the reference forward calls the same names.
#pragma once
#include <cstdint>
#include <functional>

namespace hl {

// One intermediate: `rows` rows of `cols` floats, row r at data + r·stride. Rows are positions of the
// run: registers 0 .. n_reg−1, token t at n_reg + t; `row` is the first. `layer` is −1 for the
// model-level tensors (embed, final_norm, logits). The data is valid only during the call.
struct Intermediate {
  const char* name = "";
  int64_t layer = -1;
  int64_t row = 0;
  int64_t rows = 0, cols = 0, stride = 0;
  const float* data = nullptr;
};

using IntermediateObserver = std::function<void(const Intermediate&)>;

struct IntermediateName {
  const char* name;
  const char* shape;  // per row, in jamba-spec.md's symbols
  const char* where;  // which layers have it, and what it is
};

// Every name a backend or the reference may report, in forward order (jamba-spec.md §3).
inline constexpr IntermediateName kIntermediates[] = {
    {"embed", "(H)", "model: the row entering layer 0 (embedding, or register row)"},
    {"attn_norm", "(H)", "every layer: input_layernorm(h), the mixer's input"},
    {"attn_heads", "(nh*hd)", "attention: Σ_j p_j v_j per head, before o_proj"},
    {"ssm_in", "(2*Di)", "Mamba: in_proj output, x branch | gate z"},
    {"ssm_conv", "(Di)", "Mamba: u = SiLU(causal conv + bias)"},
    {"ssm_delta", "(Di)", "Mamba: Δ = softplus(dt_proj(dt_norm(dt)) + bias)"},
    {"ssm_y", "(Di)", "Mamba: (h·C + D·u)·silu(z), before out_proj"},
    {"mixer_out", "(H)", "every layer: o_proj or out_proj output"},
    {"ffn_norm", "(H)", "every layer: pre_ff_layernorm(h), the feed-forward's input"},
    {"router_probs", "(E)", "MoE: softmax of the router logits"},
    {"ffn_out", "(H)", "every layer: dense SwiGLU or MoE output"},
    {"layer_out", "(H)", "every layer: the residual stream after the layer"},
    {"final_norm", "(H)", "model: final_layernorm(h) (tokens only)"},
    {"logits", "(V)", "model: LM head output (tokens only)"},
};

// The names a backend whose kernels add the mixer's and the feed-forward's outputs straight into h
// never materialises (the Vulkan backend: o_proj, out_proj and the down projections accumulate; the
// CUDA backend in one-row blocks only, cuda_reports_intermediate). It reports every other name its
// layers reach; its tests compare the names both sides report and check that exactly these are missing.
inline constexpr const char* kAccumulatedIntermediates[] = {"mixer_out", "ffn_out"};

}  // namespace hl
