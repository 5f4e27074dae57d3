// The hidden attention rows of Mamba-2 layers and their collector (hidden_attention.h).
#include "engine/probes/hidden_attention.h"

#include <cmath>
#include <cstring>
#include <string>

#include "engine/core/error.h"

namespace hl {

void hidden_attention_row(const SsmRows& in, int64_t h, int64_t t, float* out) {
  const int64_t N = in.N, GN = in.G * in.N, g = h / (in.nh / in.G);
  const double A = in.A[static_cast<size_t>(h)];
  const float* Ct = &in.C[static_cast<size_t>(t * GN + g * N)];
  double decay = 0;  // A_h Σ_{r=s+1..t} Δ_{r,h}, grown as s walks back from t
  for (int64_t s = t; s >= 0; --s) {
    const float* Bs = &in.B[static_cast<size_t>(s * GN + g * N)];
    double cb = 0;
    for (int64_t n = 0; n < N; ++n) cb += static_cast<double>(Ct[n]) * Bs[n];
    const double dts = in.delta[static_cast<size_t>(s * in.nh + h)];
    out[s] = static_cast<float>(cb * std::exp(decay) * dts);
    decay += A * dts;
  }
}

HiddenRowStats hidden_row_stats(const float* row, int64_t n) {
  HiddenRowStats st;
  if (n <= 0) return st;
  for (int64_t s = 0; s < n; ++s) st.abs_sum += std::fabs(static_cast<double>(row[s]));
  double H = 0;
  for (int64_t s = 0; s < n; ++s) {
    const double p = st.abs_sum > 0 ? std::fabs(static_cast<double>(row[s])) / st.abs_sum : 1.0 / static_cast<double>(n);
    if (p > 0) H -= p * std::log(p);
    if (s == 0) st.first_mass = p;
  }
  st.entropy = H;
  st.entropy_norm = n > 1 ? H / std::log(static_cast<double>(n)) : 0.0;
  return st;
}

HiddenAttentionCollector::HiddenAttentionCollector(std::shared_ptr<const Model> model) : model_(std::move(model)) {
  const JambaConfig& c = model_->config;
  layers_.resize(static_cast<size_t>(model_->schedule.num_ssm()));
  for (int64_t i : model_->schedule.ssm_layers()) {
    const LayerSpec& l = model_->schedule[i];
    if (l.mixer != MixerKind::Mamba2 && l.mixer != MixerKind::Parallel) continue;  // Mamba-1: not yet
    SsmRows& r = layers_[static_cast<size_t>(l.ssm_index)];
    r.nh = c.mamba_n_heads;
    r.N = c.mamba_d_state;
    r.G = c.mamba_n_groups;
    r.A = model_->w.layers[static_cast<size_t>(i)].mamba2.A;
  }
}

IntermediateObserver HiddenAttentionCollector::observer() {
  return [this](const Intermediate& im) { take(im); };
}

void HiddenAttentionCollector::reset() {
  for (SsmRows& r : layers_) {
    r.B.clear();
    r.C.clear();
    r.delta.clear();
  }
}

void HiddenAttentionCollector::take(const Intermediate& im) {
  const bool conv = std::strcmp(im.name, "ssm_conv") == 0, delta = std::strcmp(im.name, "ssm_delta") == 0;
  if ((!conv && !delta) || im.layer < 0 || im.layer >= model_->schedule.size()) return;
  const int64_t m = model_->schedule[im.layer].ssm_index;
  if (m < 0) return;
  SsmRows& r = layers_[static_cast<size_t>(m)];
  if (r.nh == 0) return;
  const int64_t Di = model_->config.mamba_inner(), GN = r.G * r.N;
  for (int64_t k = 0; k < im.rows; ++k) {
    const float* row = im.data + k * im.stride;
    if (delta) {
      if (im.cols != r.nh) throw Error("hidden attention: ssm_delta of layer " + std::to_string(im.layer) + " has " +
                                       std::to_string(im.cols) + " values a row, expected " + std::to_string(r.nh));
      r.delta.insert(r.delta.end(), row, row + r.nh);
    } else {
      if (im.cols != Di + 2 * GN) throw Error("hidden attention: ssm_conv of layer " + std::to_string(im.layer) +
                                              " has " + std::to_string(im.cols) + " values a row, expected " +
                                              std::to_string(Di + 2 * GN));
      r.B.insert(r.B.end(), row + Di, row + Di + GN);
      r.C.insert(r.C.end(), row + Di + GN, row + Di + 2 * GN);
    }
  }
}

const SsmRows& HiddenAttentionCollector::layer(int64_t ssm_index) const {
  if (ssm_index < 0 || ssm_index >= static_cast<int64_t>(layers_.size()))
    throw Error("hidden attention: SSM layer " + std::to_string(ssm_index) + " is out of range [0, " +
                std::to_string(layers_.size()) + ")");
  const SsmRows& r = layers_[static_cast<size_t>(ssm_index)];
  if (r.nh == 0)
    throw Error("hidden attention: SSM layer " + std::to_string(ssm_index) +
                " is a Mamba-1 layer; only Mamba-2 layers are supported so far");
  return r;
}

}  // namespace hl
