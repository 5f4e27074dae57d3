// The Mamba-1 mixer's weights as Jamba stores them (jamba-spec.md §2.1): in_proj, the depthwise conv,
// x_proj, the dt/B/C RMSNorm weights, dt_proj with its bias, A = −exp(A_log) in fp32, D, out_proj,
// and the optional biases the config names; registered for the loader, counts and adapters
// (mixer_ops.h). Not its math: reference/ref_mamba.cpp and the backends' Mamba-1 units.
#include <cmath>

#include "engine/model/mixer_ops.h"
#include "engine/model/weight_binder.h"

namespace hl {
namespace {

void bind(WeightBinder& b, const JambaConfig& c, const std::string& layer, LayerWeights& lw) {
  const int64_t H = c.hidden_size, Di = c.mamba_inner(), N = c.mamba_d_state, W = c.mamba_d_conv, R = c.mamba_dt_rank;
  const std::string p = layer + "mamba.";
  MambaWeights& w = lw.mamba;
  w.in_proj = b.mat(p + "in_proj.weight", 2 * Di, H);  // (2*Di, H)
  w.in_bias = b.flagged_vec(c.mamba_proj_bias, "mamba_proj_bias", p + "in_proj.bias", {2 * Di});
  w.out_bias = b.flagged_vec(c.mamba_proj_bias, "mamba_proj_bias", p + "out_proj.bias", {H});
  w.conv_w = b.vec(p + "conv1d.weight", {Di, 1, W});  // (Di, 1, W) → (Di, W)
  w.conv_b = b.flagged_vec(c.mamba_conv_bias, "mamba_conv_bias", p + "conv1d.bias", {Di});
  w.x_proj = b.mat(p + "x_proj.weight", R + 2 * N, Di);  // (R + 2N, Di)
  w.dt_norm = b.vec(p + "dt_layernorm.weight", {R});
  w.b_norm = b.vec(p + "b_layernorm.weight", {N});
  w.c_norm = b.vec(p + "c_layernorm.weight", {N});
  w.dt_proj = b.mat(p + "dt_proj.weight", Di, R);  // (Di, R)
  w.dt_bias = b.vec(p + "dt_proj.bias", {Di});
  w.A = b.vec(p + "A_log", {Di, N});      // (Di, N)
  for (float& a : w.A) a = -std::exp(a);  // A = -exp(A_log), fp32
  w.D = b.vec(p + "D", {Di});
  w.out_proj = b.mat(p + "out_proj.weight", H, Di);  // (H, Di)
}

uint64_t widened_floats(const JambaConfig& c) {
  const uint64_t H = c.hidden_size, Di = c.mamba_inner(), N = c.mamba_d_state, W = c.mamba_d_conv;
  const uint64_t R = c.mamba_dt_rank;
  uint64_t floats = Di * W + R + 2 * N + Di /* dt bias */ + Di * N + Di;
  if (c.mamba_conv_bias) floats += Di;
  if (c.mamba_proj_bias) floats += 2 * Di + H;
  return floats;
}

void each_matrix(const LayerWeights& lw, const MixerMatrixVisitor& f) {
  const MambaWeights& m = lw.mamba;
  f("mamba.in_proj", m.in_proj, &m.in_bias);
  f("mamba.x_proj", m.x_proj, nullptr);
  f("mamba.dt_proj", m.dt_proj, &m.dt_bias);
  f("mamba.out_proj", m.out_proj, &m.out_bias);
}

int64_t vector_floats(const LayerWeights& lw) {
  const MambaWeights& m = lw.mamba;
  return static_cast<int64_t>(m.in_bias.size() + m.conv_w.size() + m.conv_b.size() + m.dt_norm.size() +
                              m.b_norm.size() + m.c_norm.size() + m.dt_bias.size() + m.A.size() + m.D.size() +
                              m.out_bias.size());
}

int64_t state_elements(const JambaConfig& c) {
  return c.mamba_inner() * (c.mamba_d_conv + c.mamba_d_state);  // the conv window and h, per channel
}

const MixerOpsTable::Add kRegistered{{MixerKind::Mamba1, bind, widened_floats, each_matrix, vector_floats, state_elements}};

}  // namespace
}  // namespace hl
