// Welford update of the centred sum of squares (see rank1.h): with δ = x − x̄_old,
// x̄_new = x̄_old + δ/n and M2 += δ·(x − x̄_new).
#include "engine/probes/rank1.h"

#include <cmath>

namespace hl {

void Rank1Tracker::reset(int64_t dim) {
  mean_.assign(static_cast<size_t>(dim), 0.0);
  m2_ = sq_ = sq_c_ = 0;
  n_ = 0;
}

float Rank1Tracker::add(const float* x) {
  ++n_;
  const double inv_n = 1.0 / static_cast<double>(n_);
  double dm2 = 0, sq = 0;
  for (size_t i = 0; i < mean_.size(); ++i) {
    const double xi = x[i];
    const double delta = xi - mean_[i];
    mean_[i] += delta * inv_n;
    dm2 += delta * (xi - mean_[i]);
    sq += xi * xi;
  }
  m2_ += dm2;
  const double y = sq - sq_c_;  // Kahan sum of the row norms
  const double t = sq_ + y;
  sq_c_ = (t - sq_) - y;
  sq_ = t;
  return distance();
}

float Rank1Tracker::distance() const {
  if (n_ < 2 || !(sq_ > 0)) return 0.0f;
  const double r = m2_ > 0 ? m2_ / sq_ : 0.0;
  return static_cast<float>(std::sqrt(r));
}

}  // namespace hl
