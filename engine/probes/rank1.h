// Rank-to-1 distance of the residual stream (Dong, Cordonnier & Loukas 2021: res(X) = X − 1x̄ᵀ, reported as ‖res(X)‖_F/‖X‖_F)
// over tokens 0..t, updated in O(hidden) per token from running sums. Welford's update keeps the
// centred sum of squares M2 = Σ_t ‖x_t − x̄‖² without the cancellation of Σ‖x‖² − T‖x̄‖², in float64.
#pragma once
#include <cstdint>
#include <vector>

namespace hl {

class Rank1Tracker {
 public:
  explicit Rank1Tracker(int64_t dim = 0) { reset(dim); }
  void reset(int64_t dim);
  // Adds row x (dim,) and returns the distance over all rows so far (0 for one row or ‖X‖ = 0).
  float add(const float* x);
  float distance() const;
  int64_t count() const { return n_; }

 private:
  std::vector<double> mean_;  // (dim,) running mean row x̄
  double m2_ = 0;             // Σ_t ‖x_t − x̄‖²
  double sq_ = 0, sq_c_ = 0;  // Σ_t ‖x_t‖² with Kahan compensation
  int64_t n_ = 0;
};

}  // namespace hl
