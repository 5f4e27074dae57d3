// Parameter and byte counts of a bound model (the `info` and `bench` numbers, trace-format.md §4)
// and the list of its matrices. Counting convention: every parameter once (a tied head is the
// embedding); per decode step, every matrix a token touches plus the widened vectors at 4 bytes.
#include <algorithm>
#include <functional>

#include "engine/model/weights.h"
#include "engine/model/matrix_roles.h"
#include "engine/model/mixer_ops.h"

namespace hl {
namespace {

int64_t numel(const Mat& m) {
  return m.empty() ? 0 : m.rows * m.cols;
}

int64_t mlp_params(const MlpWeights& x) {
  return numel(x.gate) + numel(x.up) + numel(x.down);
}
int64_t mlp_bytes(const MlpWeights& x) {
  return x.gate.bytes() + x.up.bytes() + x.down.bytes();
}

// The MLPs of an MoE layer: its experts, then the shared one when it has one.
std::vector<MlpWeights*> moe_mlps(MoeWeights& m) {
  std::vector<MlpWeights*> v;
  for (MlpWeights& x : m.experts) v.push_back(&x);
  if (!m.shared.down.empty()) v.push_back(&m.shared);
  return v;
}

// Sum of the k largest of an MoE layer's expert sizes (all equal in a real checkpoint).
int64_t top_k_sum(const MoeWeights& moe, int64_t k, const std::function<int64_t(const MlpWeights&)>& size) {
  std::vector<int64_t> s;
  for (const MlpWeights& x : moe.experts) s.push_back(size(x));
  std::sort(s.begin(), s.end(), std::greater<int64_t>());
  int64_t n = 0;
  for (size_t i = 0; i < s.size() && static_cast<int64_t>(i) < k; ++i) n += s[i];
  return n;
}

// An MoE layer's widened vectors (the correction bias, the shared expert's and latent projections'
// biases) and latent projection matrices: read by every token like the router.
int64_t moe_vector_params(const MoeWeights& m) {
  return static_cast<int64_t>(m.router_bias.size() + m.latent_in_bias.size() + m.latent_out_bias.size() +
                              m.shared.gate_bias.size() + m.shared.up_bias.size() + m.shared.down_bias.size());
}

// Widened float vectors of one layer (norms, biases, conv, A, D, sinks): parameters, 4 bytes each.
int64_t layer_vector_params(const LayerWeights& l, const LayerSpec& s) {
  return static_cast<int64_t>(l.input_norm.size() + l.pre_ff_norm.size() + l.mlp.gate_bias.size() + l.mlp.up_bias.size() +
                              l.mlp.down_bias.size()) +
         mixer_ops(s.mixer).vector_floats(l);
}

// The mixer's matrices: parameters, and bytes at their stored dtype.
int64_t layer_mixer_params(const LayerWeights& l, const LayerSpec& s) {
  int64_t n = 0;
  mixer_ops(s.mixer).each_matrix(l, [&](const char*, const Mat& m, const std::vector<float>*) { n += numel(m); });
  return n;
}

int64_t layer_mixer_bytes(const LayerWeights& l, const LayerSpec& s) {
  int64_t n = 0;
  mixer_ops(s.mixer).each_matrix(l, [&](const char*, const Mat& m, const std::vector<float>*) { n += m.bytes(); });
  return n;
}

bool head_is_embed(const ModelWeights& w) {
  return w.lm_head.data == w.embed.data;
}

}  // namespace

void each_matrix_role(Model& m, const std::function<void(const char* role, Mat&)>& f) {
  auto add = [&](const char* role, Mat& x) {
    if (!x.empty()) f(role, x);
  };
  ModelWeights& w = m.w;
  add("embedding", w.embed);
  for (size_t i = 0; i < w.layers.size(); ++i) {
    LayerWeights& l = w.layers[i];
    const LayerSpec& s = m.schedule[static_cast<int64_t>(i)];
    // The matrices are this model's own (the Model is not const): the const view the kind's ops give
    // is cast back for the adapter merge and quantise on load, which rewrite them.
    mixer_ops(s.mixer).each_matrix(
        l, [&](const char* role, const Mat& x, const std::vector<float>*) { add(role, const_cast<Mat&>(x)); });
    if (s.is_moe()) {
      add("router", l.moe.router);
      add("latent", l.moe.latent_in);
      add("latent", l.moe.latent_out);
      for (MlpWeights* x : moe_mlps(l.moe)) {
        const char* role = x == &l.moe.shared ? "shared" : "expert";
        add(role, x->gate);
        add(role, x->up);
        add(role, x->down);
      }
    } else {
      add("mlp", l.mlp.gate);
      add("mlp", l.mlp.up);
      add("mlp", l.mlp.down);
    }
  }
  if (!head_is_embed(w)) add("lm_head", w.lm_head);
}

std::vector<Mat*> Model::matrices() {
  std::vector<Mat*> out;
  each_matrix_role(*this, [&](const char*, Mat& x) { out.push_back(&x); });
  return out;
}

int64_t Model::param_count() const {
  int64_t n = numel(w.embed) + static_cast<int64_t>(w.final_norm.size() + w.register_rows.size());
  if (!head_is_embed(w)) n += numel(w.lm_head);
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const LayerWeights& l = w.layers[i];
    const LayerSpec& s = schedule[static_cast<int64_t>(i)];
    n += layer_vector_params(l, s) + layer_mixer_params(l, s);
    if (s.is_moe()) {
      n += numel(l.moe.router) + mlp_params(l.moe.shared) + moe_vector_params(l.moe) + numel(l.moe.latent_in) +
           numel(l.moe.latent_out);
      for (const MlpWeights& x : l.moe.experts) n += mlp_params(x);
    } else {
      n += mlp_params(l.mlp);
    }
  }
  return n;
}

int64_t Model::active_param_count() const {
  int64_t n = param_count();
  const int64_t k = config.num_experts_per_tok;
  for (int64_t i : schedule.moe_layers()) {
    const LayerWeights& l = w.layers[static_cast<size_t>(i)];
    int64_t all = 0;
    for (const MlpWeights& x : l.moe.experts) all += mlp_params(x);
    n -= all - top_k_sum(l.moe, k, mlp_params);
  }
  return n;
}

int64_t Model::weight_bytes_per_token() const {
  // One embedding row, the whole LM head (read for the logits even when tied), the final norm.
  int64_t n = w.embed.row_bytes() + w.lm_head.bytes() +
              static_cast<int64_t>(w.final_norm.size() * sizeof(float));
  const int64_t k = config.num_experts_per_tok;
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const LayerWeights& l = w.layers[i];
    const LayerSpec& s = schedule[static_cast<int64_t>(i)];
    n += layer_vector_params(l, s) * static_cast<int64_t>(sizeof(float)) + layer_mixer_bytes(l, s);
    if (s.is_moe())
      n += l.moe.router.bytes() + top_k_sum(l.moe, k, mlp_bytes) + mlp_bytes(l.moe.shared) + l.moe.latent_in.bytes() +
           l.moe.latent_out.bytes() + moe_vector_params(l.moe) * static_cast<int64_t>(sizeof(float));
    else
      n += mlp_bytes(l.mlp);
  }
  return n;  // registers and the mean embedding are read once per run, not per token
}

}  // namespace hl
