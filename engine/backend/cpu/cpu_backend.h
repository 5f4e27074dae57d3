// The CPU reference backend: the Jamba forward of jamba-spec.md §3 in fp32 with the instruments of
// trace-format.md §3 computed next to the data. One code path serves decode (S = 1) and prefill
// (S > 1) up to the matrix products (vector matvec vs BLAS panels, equal within fp32 rounding), so
// they agree to ~1e-6. Decode allocates nothing per token: every buffer is owned here and reused.
#pragma once
#include <algorithm>
#include <memory>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/model/intermediates.h"
#include "engine/probes/rank1.h"

namespace hl::cpu {

// Most experts per token the fused decode path takes (more fall back to the prefill path).
constexpr int kMaxDecodeExperts = 16;

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(std::shared_ptr<const Model> model);
  std::string name() const override { return "cpu"; }
  void start(const RunOptions& opts) override;
  void forward(const int32_t* tokens, int64_t S, std::vector<TokenTrace>* out) override;
  int64_t position() const override { return position_; }
  const Model& model() const override { return *model_; }
  const RunOptions& options() const override { return opts_; }
  int registers() const override { return n_reg_; }
  // Called with every named intermediate (model/intermediates.h) of later blocks; empty: none (the
  // unset observer costs one test per name and block).
  void set_observer(IntermediateObserver f) { observer_ = std::move(f); }

 private:
  struct AttnState {
    std::vector<float> k, v;  // (capacity, nkv*hd) each, registers first; rows [0, len) in use
    int64_t len = 0;
    Normalizer norm = Normalizer::Softmax;
    std::vector<float> null_logit;  // (nh,) sink logits (0 for softmax-1)
  };
  struct MambaState {
    std::vector<float> conv;  // (W, Di): raw inputs u0 of the last W tokens, oldest row first
    std::vector<float> ssm;   // (Di, N) in channel tiles (simd::tile_index)
  };
  // Buffers of one forward call, grown to the largest S seen and then reused (never shrunk).
  struct Scratch {
    std::vector<float> h, x, y;                    // (S, H) residual stream, normed input, mixer/FF output
    std::vector<TokenTrace*> recs;                 // (S,)
    std::vector<float*> logit_rows;                // (S,) the records' logits
    std::vector<float> q, o;                       // (S, nh*hd)
    std::vector<float> xz, u, p, dtr, Bm, Cm, dt;  // Mamba: (S, 2Di), (S, Di), (S, R+2N), (S, R), (S, N) ×2, (S, Di)
    std::vector<float> gated, retained;            // (S, Di)
    std::vector<float> rlogits, rprobs;            // (S, E)
    std::vector<int32_t> topk;                     // (S, K)
    std::vector<float> g, u_ff, xe, ye, ye_k;      // FF hidden (n, I) ×2, gathered rows (n, H), (n, H), (K, H)
    std::vector<int64_t> rows;                     // tokens routed to one expert
    std::vector<float> weights;                    // their routing probabilities
    std::vector<std::vector<float>> thread_rows;   // per pool thread: attention logits | probabilities
  };

  // Runs S rows of embeddings h (S, H) through the model; recs[s] is null for registers.
  void run_block(float* h, int64_t S, TokenTrace* const* recs);
  void attention(int64_t layer, const float* x, int64_t S, float* y, TokenTrace* const* recs);
  void mamba(int64_t layer, const float* x, int64_t S, float* y, TokenTrace* const* recs);
  void feed_forward(int64_t layer, const float* x, int64_t S, float* y, TokenTrace* const* recs);
  // SwiGLU of n rows x (n, H) through one MLP: y (n, H). Uses scratch g, u_ff.
  void swiglu(const MlpWeights& w, const float* x, int64_t n, float* y);
  // Decode: SwiGLU of one row through k MLPs, y (H,) = Σ_j weight_j · mlp_j(x) in the order given
  // (weights null: k == 1, no scaling). Gate and up of all k in one threaded pass, then the downs.
  void swiglu_decode(const MlpWeights* const* mlps, const float* weights, int k, const float* x, float* y);
  void observe_residual(int64_t column, const float* h, int64_t S, TokenTrace* const* recs);
  void init_record(TokenTrace& r, int32_t token, int64_t t) const;
  // The observer, if set, on S rows of `cols` floats of `name` (rows of recs: null ones are registers).
  void observe(const char* name, int64_t layer, const float* data, int64_t S, int64_t cols,
               TokenTrace* const* recs) const {
    if (!observer_) return;
    const int64_t row = recs[0] ? n_reg_ + recs[0]->position : 0;
    observer_(Intermediate{name, layer, row, S, cols, cols, data});
  }

  std::shared_ptr<const Model> model_;
  const JambaConfig& cfg_;
  RunOptions opts_;
  int n_reg_ = 0;
  int64_t position_ = 0;
  const LayerSchedule& sched_;  // model_->schedule: per layer its kinds and its index among each kind
  std::vector<AttnState> attn_;
  std::vector<MambaState> mamba_;
  std::vector<std::vector<float>> conv_wT_;  // per Mamba layer: conv_w transposed to (W, Di)
  std::vector<std::vector<float>> A_tiled_;  // per Mamba layer: A (Di, N) in channel tiles
  std::vector<Rank1Tracker> rank1_;          // (L+1) columns
  Scratch sc_;
  IntermediateObserver observer_;
};

// v.data() with at least n elements; grows geometrically, never shrinks, so a steady decode
// allocates nothing. New elements are zero.
template <class T>
T* grow(std::vector<T>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) {
    if (v.capacity() < static_cast<size_t>(n)) v.reserve(std::max(static_cast<size_t>(n), 2 * v.capacity()));
    v.resize(static_cast<size_t>(n));
  }
  return v.data();
}

}  // namespace hl::cpu
