// RunStats (see run_stats.h): cumulative router sums per MoE layer, sorted step times and running
// residual maxima, extended record by record.
#include "sessions/run_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace hl {

void RunStats::reset(const Shape& shape) {
  shape_ = shape;
  n_ = 0;
  first_.reset();
  last_.reset();
  layers_.assign(static_cast<size_t>(std::max(0, shape.moe)), Layer{});
  steps_.clear();
  depth_max_.assign(static_cast<size_t>(shape.depth + 1), -1.0);
  depth_arg_.assign(static_cast<size_t>(shape.depth + 1), -1);
}

void RunStats::update(const Run& run, const Shape& shape) {
  run_ = &run;
  const RecordList& recs = run.records;
  // Still the records counted? The first and the last counted must be the run's own, alive.
  const bool same = shape == shape_ && static_cast<int64_t>(recs.size()) >= n_ &&
                    (n_ == 0 || (first_.lock() == recs.ptr(0) && last_.lock() == recs.ptr(static_cast<size_t>(n_ - 1))));
  if (!same || depth_max_.size() != static_cast<size_t>(shape.depth + 1)) reset(shape);
  const int64_t T = static_cast<int64_t>(recs.size());
  for (int64_t t = n_; t < T; ++t) {
    const TokenTrace& r = recs[static_cast<size_t>(t)];
    if (t > 0 && std::isfinite(r.step_seconds))
      steps_.insert(std::upper_bound(steps_.begin(), steps_.end(), r.step_seconds), r.step_seconds);
    if (r.resid_max_abs.size() >= depth_max_.size())
      for (size_t c = 0; c < depth_max_.size(); ++c)
        if (r.resid_max_abs[c] > depth_max_[c]) {
          depth_max_[c] = r.resid_max_abs[c];
          depth_arg_[c] = static_cast<int>(t);
        }
  }
  if (T > 0) {
    first_ = recs.ptr(0);
    last_ = recs.ptr(static_cast<size_t>(T - 1));
  }
  n_ = T;
}

RunStats::Layer& RunStats::layer(int ord) {
  Layer& L = layers_.at(static_cast<size_t>(ord));
  const size_t E = static_cast<size_t>(shape_.E), k = static_cast<size_t>(shape_.k);
  if (L.n == 0) {
    L.count.assign(E, 0.0);
    L.psum.assign(E, 0.0);
    L.z.assign(1, 0.0);
  }
  for (int64_t t = L.n; t < n_; ++t) {
    const TokenTrace& r = run_->records[static_cast<size_t>(t)];
    // Row t + 1 = row t + this token, summed in token order as router_window does.
    const size_t at = L.count.size();
    L.count.resize(at + E);
    L.psum.resize(at + E);
    std::copy_n(L.count.data() + at - E, E, L.count.data() + at);
    std::copy_n(L.psum.data() + at - E, E, L.psum.data() + at);
    const bool has = r.router_probs.size() >= (static_cast<size_t>(ord) + 1) * E &&
                     r.router_topk.size() >= (static_cast<size_t>(ord) + 1) * k;
    double l = 0;
    if (has) {
      for (size_t e = 0; e < E; ++e) L.psum[at + e] += r.router_probs[static_cast<size_t>(ord) * E + e];
      for (size_t j = 0; j < k; ++j) {
        const int32_t e = r.router_topk[static_cast<size_t>(ord) * k + j];
        if (e >= 0 && static_cast<size_t>(e) < E) L.count[at + static_cast<size_t>(e)] += 1.0;
      }
      l = r.router_lse.size() > static_cast<size_t>(ord) ? r.router_lse[static_cast<size_t>(ord)] : 0.0;
    }
    L.z.push_back(L.z.back() + l * l);
    const RouterWindowStats w = router_stats_from_sums(L.count.data() + at, L.psum.data() + at, L.z.back(), t + 1,
                                                       shape_.E, shape_.k);
    L.balance.push_back(w.balance_loss);
    L.zloss.push_back(w.z_loss);
    L.max_load.push_back(w.max_load);
  }
  L.n = n_;
  return L;
}

RouterWindowStats RunStats::window(int ord, int64_t n) {
  n = std::clamp<int64_t>(n, 0, n_);
  if (n <= 0 || shape_.E == 0) return router_stats_from_sums(nullptr, nullptr, 0.0, n, shape_.E, shape_.k);
  const Layer& L = layer(ord);
  const size_t E = static_cast<size_t>(shape_.E);
  return router_stats_from_sums(L.count.data() + static_cast<size_t>(n) * E, L.psum.data() + static_cast<size_t>(n) * E,
                                L.z[static_cast<size_t>(n)], n, shape_.E, shape_.k);
}

double RunStats::step_percentile(double p) const {
  if (steps_.empty()) return std::numeric_limits<double>::quiet_NaN();
  const double pos = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(steps_.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, steps_.size() - 1);
  const double f = pos - static_cast<double>(lo);
  return steps_[lo] + (steps_[hi] - steps_[lo]) * f;
}

}  // namespace hl
