// RunStats: the statistics of a whole run that views draw (issue 17 item 2) — router load over the
// windows 0..t of an MoE layer (Fedus, Zoph & Shazeer 2022; Zoph et al. 2022), the quantiles of the
// time per token, and the largest |x| of the residual stream at each depth with the token holding
// it. They are extended by the records appended since the last update (cumulative sums, a sorted
// list, running maxima), so a redraw while stepping costs the new tokens, not the whole run.
// Updating checks that the records it counted are still the run's (its first and last counted
// records are the run's own, alive): a reset, a replaced run or a step taken again starts it over.
// Records are immutable once appended (RecordList shares them; nothing edits a recorded run in
// place), which is what makes extending them sound. Holds no record, only its counts.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/probes/router_probe.h"
#include "sessions/recording.h"

namespace hl {

class RunStats {
 public:
  // What the records hold: E experts, top-k, X MoE layers; `depth` + 1 residual maxima.
  struct Shape {
    int E = 0, k = 0, moe = 0, depth = 0;
    bool operator==(const Shape& o) const { return E == o.E && k == o.k && moe == o.moe && depth == o.depth; }
  };

  // Brings every statistic up to date with `run` (records without router or residual fields are
  // skipped for those statistics).
  void update(const Run& run, const Shape& shape);
  int64_t tokens() const { return n_; }

  // Router statistics of MoE layer `ord` over tokens 0..n-1, equal to router_window over those
  // records (the same sums in the same order). n ≤ tokens(). A layer's sums are taken when first
  // asked for, from the run last passed to update(), which must still be alive.
  RouterWindowStats window(int ord, int64_t n);
  // Balance loss, z-loss and max load of the windows 0..t, for every token t.
  const std::vector<double>& balance(int ord) { return layer(ord).balance; }
  const std::vector<double>& z_loss(int ord) { return layer(ord).zloss; }
  const std::vector<double>& max_load(int ord) { return layer(ord).max_load; }

  // The p-th percentile (0..100, linear between order statistics) of the step times of tokens
  // 1..T-1 (the first token's is the time to first token; non-finite times are left out); NaN when
  // there is none.
  double step_percentile(double p) const;
  // The step times of tokens 1..T-1 in increasing order (non-finite ones left out).
  const std::vector<double>& sorted_steps() const { return steps_; }
  // Largest resid_max_abs over the run at each depth 0..depth, and the first token holding it (-1
  // when the records have no residual maxima).
  const std::vector<double>& depth_max() const { return depth_max_; }
  const std::vector<int>& depth_arg() const { return depth_arg_; }

 private:
  struct Layer {
    int64_t n = 0;                   // tokens summed so far
    std::vector<double> count, psum;  // (n + 1) × E cumulative top-k counts and probabilities
    std::vector<double> z;           // (n + 1) cumulative lse²
    std::vector<double> balance, zloss, max_load;  // (n) per token t: the window 0..t
  };
  Layer& layer(int ord);  // extended to tokens()
  void reset(const Shape& shape);

  Shape shape_;
  int64_t n_ = 0;
  const Run* run_ = nullptr;                      // the run of the last update
  std::weak_ptr<const TokenTrace> first_, last_;  // the records counted: still the run's?
  std::vector<Layer> layers_;
  std::vector<double> steps_;  // sorted step times of tokens 1..n-1
  std::vector<double> depth_max_;
  std::vector<int> depth_arg_;
};

}  // namespace hl
