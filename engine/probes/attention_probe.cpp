// Stable normalizers and the row instruments (see attention_probe.h). With m the maximum over the
// keys and the virtual logit, D = Σ e^(z_j − m) + e^(z_null − m), ln p_j = z_j − m − ln D, so the
// entropy is H = ln D − Σ_j p_j (z_j − m) − p_null (z_null − m): one multiply-add per key.
#include "engine/probes/attention_probe.h"

#include <cmath>

namespace hl {

void attention_row(const float* z, int64_t n, Normalizer norm, float null_logit, float* p, AttnRowStats* stats) {
  const bool has_null = norm != Normalizer::Softmax;
  const float zn = norm == Normalizer::Softmax1 ? 0.0f : null_logit;
  float m = has_null ? zn : -INFINITY;
  float maxabs = 0;
  for (int64_t j = 0; j < n; ++j) {
    m = std::fmax(m, z[j]);
    maxabs = std::fmax(maxabs, std::fabs(z[j]));
  }
  double denom = 0;
  for (int64_t j = 0; j < n; ++j) {
    p[j] = std::exp(z[j] - m);
    denom += p[j];
  }
  const double e_null = has_null ? std::exp(static_cast<double>(zn) - m) : 0.0;
  denom += e_null;
  const double inv = 1.0 / denom;
  double mass = 0, weighted = 0;
  for (int64_t j = 0; j < n; ++j) {
    p[j] = static_cast<float>(p[j] * inv);
    if (stats) {
      mass += p[j];
      weighted += static_cast<double>(p[j]) * (static_cast<double>(z[j]) - m);
    }
  }
  if (!stats) return;
  const double p_null = e_null * inv;
  if (has_null) weighted += p_null * (static_cast<double>(zn) - m);
  double h = std::log(denom) - weighted;
  if (h < 0) h = 0;  // rounding on one-hot rows
  stats->entropy = static_cast<float>(h);
  const double keys = static_cast<double>(n) + (has_null ? 1.0 : 0.0);
  stats->entropy_norm = keys > 1.0 ? static_cast<float>(h / std::log(keys)) : 0.0f;
  stats->mass = has_null ? static_cast<float>(mass) : 1.0f;
  stats->p_null = static_cast<float>(p_null);
  stats->max_abs_logit = maxabs;
}

}  // namespace hl
