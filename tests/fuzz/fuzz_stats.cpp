// libFuzzer target for the sweep stats reader (issue 21: stats files, progress files and the
// aggregates MPI ranks send are untrusted input): any input must either load into a SweepStats whose
// tensors agree with each other, or throw LoadError. What loads must also survive what its users do
// with it: quantiles and variances per cell (the app's box plots, read_stats.py), a merge with
// itself (rank 0 merging ranks) and a bit-exact round trip through the writer (progress files).
// Seeds: tests/fuzz/corpus/stats, written by `hybridlens sweep` over three {"ids": ...} prompts on
// `hl-generate --preset tiny --dtype f32 --layers 4 --vocab 64`: the stats file, the same with
// --no-full --sketch-accuracy 0.1, and the progress file (exact doubles) of a run stopped by
// HL_SWEEP_KILL_AFTER=2. The corruption table is tests/sweep/test_sweep_stats.cpp (SweepFile.CorruptionTable).
// Run:   ./fuzz_stats -max_total_time=60 -rss_limit_mb=2048 corpus_dir tests/fuzz/corpus/stats
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "engine/core/error.h"
#include "sessions/sweep_file.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

// What the views and read_stats.py index with must be in range.
void check_shapes(const hl::SweepStats& st) {
  for (const hl::Distribution& d : st.dists) {
    const int64_t n = d.cells();
    check(static_cast<int64_t>(d.count.size()) == n && static_cast<int64_t>(d.mean.size()) == n &&
          static_cast<int64_t>(d.m2.size()) == n && static_cast<int64_t>(d.min.size()) == n &&
          static_cast<int64_t>(d.max.size()) == n && static_cast<int64_t>(d.sketch.size()) == n &&
          static_cast<int64_t>(d.hist.size()) == n * hl::kHistBins);
  }
  const hl::RouterSums& r = st.router;
  const size_t xe = static_cast<size_t>(r.moe * r.experts);
  check(r.topk_count.size() == xe && r.prob_sum.size() == xe && r.tokens.size() == static_cast<size_t>(r.moe) &&
        r.lse_sq_sum.size() == static_cast<size_t>(r.moe));
}

void check_quantiles(const hl::SweepStats& st) {
  for (const hl::Distribution& d : st.dists) {
    for (int64_t c = 0; c < d.cells(); ++c) {
      for (double q : hl::stats_quantile_levels()) {
        const double v = d.quantile(c, q, st.sketch);
        if (d.count[c] == 0) {
          check(std::isnan(v));
        } else {
          check(!std::isnan(v) && v >= d.min[c] && v <= d.max[c]);
        }
      }
      (void)d.variance(c);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hl::SweepFile f;
  try {
    f = hl::parse_sweep_stats(data, size, "fuzz.hlstats");
  } catch (const hl::LoadError&) {
    return 0;
  }
  check_shapes(f.stats);
  check_quantiles(f.stats);
  // A progress file round-trips bit for bit: what the writer makes of it, the reader takes back.
  if (f.exact) {
    const std::vector<uint8_t> again = hl::serialize_sweep_stats(f.stats, f.manifest, true, &f.finished);
    hl::SweepFile g;
    try {
      g = hl::parse_sweep_stats(again.data(), again.size(), "fuzz-again.hlstats");
    } catch (const hl::LoadError&) {
      std::abort();  // the writer wrote what the reader refuses
    }
    check(g.stats.prompts == f.stats.prompts && g.stats.tokens == f.stats.tokens && g.finished == f.finished);
    for (size_t i = 0; i < f.stats.dists.size(); ++i) check(g.stats.dists[i].count == f.stats.dists[i].count);
  }
  // Rank 0 merges aggregates of the same shape.
  try {
    hl::SweepStats twice = f.stats;
    twice.merge(f.stats);
    check(twice.prompts == 2 * f.stats.prompts);
  } catch (const hl::Error&) {
  }
  return 0;
}
