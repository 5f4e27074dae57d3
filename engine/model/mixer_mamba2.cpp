// The Mamba-2 mixer's weights (mixer_mamba2.h) under HF Bamba's names (`mamba.in_proj`, `mamba.conv1d`,
// `mamba.dt_bias`, `mamba.A_log`, `mamba.D`, `mamba.norm`, `mamba.out_proj`), registered for the
// loader, counts and adapters (mixer_ops.h). Not its math: reference/ref_mamba2.cpp and the
// backends' Mamba-2 units.
#include <cmath>

#include "engine/model/mixer_ops.h"
#include "engine/model/weight_binder.h"

namespace hl {

std::vector<float> mamba2_mup_vector(const JambaConfig& c) {
  if (!c.has_ssm_multipliers()) return {};
  const int64_t Di = c.mamba_inner(), GN = c.mamba_n_groups * c.mamba_d_state;
  const int64_t ends[5] = {Di, 2 * Di, 2 * Di + GN, 2 * Di + 2 * GN, 2 * Di + 2 * GN + c.mamba_n_heads};
  std::vector<float> v(static_cast<size_t>(ends[4]));
  for (int64_t seg = 0, k = 0; seg < 5; ++seg)
    for (; k < ends[seg]; ++k) v[static_cast<size_t>(k)] = static_cast<float>(c.ssm_multipliers[static_cast<size_t>(seg)]);
  return v;
}

namespace {

void bind(WeightBinder& b, const JambaConfig& c, const std::string& layer, LayerWeights& lw) {
  const int64_t H = c.hidden_size, Di = c.mamba_inner(), W = c.mamba_d_conv, nh = c.mamba_n_heads;
  const int64_t conv = c.mamba2_conv_dim(), proj = Di + conv + nh;
  const std::string p = layer + "mamba.";
  Mamba2Weights& w = lw.mamba2;
  w.in_proj = b.mat(p + "in_proj.weight", proj, H);  // (Di + conv_dim + nh, H)
  w.in_bias = b.flagged_vec(c.mamba_proj_bias, "mamba_proj_bias", p + "in_proj.bias", {proj});
  const bool falcon = c.family == Family::FalconH1;  // out_proj's bias has its own flag there
  w.out_bias = b.flagged_vec(c.mamba2_out_bias(), falcon ? "projectors_bias" : "mamba_proj_bias", p + "out_proj.bias", {H});
  w.conv_w = b.vec(p + "conv1d.weight", {conv, 1, W});  // (conv_dim, 1, W) → (conv_dim, W)
  w.conv_b = b.flagged_vec(c.mamba_conv_bias, "mamba_conv_bias", p + "conv1d.bias", {conv});
  w.dt_bias = b.vec(p + "dt_bias", {nh});
  w.A = b.vec(p + "A_log", {nh});
  for (float& a : w.A) a = -std::exp(a);  // A = −exp(A_log), fp32
  w.D = b.vec(p + "D", {nh});
  if (c.mamba_rms_norm)  // Falcon-H1's gated norm is optional
    w.norm_w = b.vec(p + "norm.weight", {Di});
  else
    b.forbid(p + "norm.weight", "config.json has mamba_rms_norm: false");
  w.out_proj = b.mat(p + "out_proj.weight", H, Di);  // (H, Di)
}

uint64_t widened_floats(const JambaConfig& c) {
  const uint64_t H = c.hidden_size, Di = c.mamba_inner(), W = c.mamba_d_conv, nh = c.mamba_n_heads;
  const uint64_t conv = c.mamba2_conv_dim();
  uint64_t floats = conv * W + 3 * nh + (c.mamba_rms_norm ? Di : 0);
  if (c.mamba_conv_bias) floats += conv;
  if (c.mamba_proj_bias) floats += Di + conv + nh;
  if (c.mamba2_out_bias()) floats += H;
  return floats;
}

void each_matrix(const LayerWeights& lw, const MixerMatrixVisitor& f) {
  const Mamba2Weights& m = lw.mamba2;
  f("mamba.in_proj", m.in_proj, &m.in_bias);
  f("mamba.out_proj", m.out_proj, &m.out_bias);
}

int64_t vector_floats(const LayerWeights& lw) {
  const Mamba2Weights& m = lw.mamba2;
  return static_cast<int64_t>(m.in_bias.size() + m.conv_w.size() + m.conv_b.size() + m.dt_bias.size() + m.A.size() +
                              m.D.size() + m.norm_w.size() + m.out_bias.size());
}

int64_t state_elements(const JambaConfig& c) {
  // The conv window (W rows of x|B|C) and the state S (nh, P, N) = Di · N.
  return c.mamba2_conv_dim() * c.mamba_d_conv + c.mamba_inner() * c.mamba_d_state;
}

const MixerOpsTable::Add kRegistered{{MixerKind::Mamba2, bind, widened_floats, each_matrix, vector_floats, state_elements}};

}  // namespace
}  // namespace hl
