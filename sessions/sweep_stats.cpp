// Sweep statistics (see sweep_stats.h): the sketch's keys, Welford updates, Chan's merge, the
// histogram and the mapping from a run's records to the cells of each instrument.
#include "sessions/sweep_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/core/error.h"

namespace hl {

int32_t SketchParams::key(double x) const {
  const double a = std::fabs(x);
  if (a < kZero) return 0;
  // Beyond ±(kKeyOffset − 1) (|x| past γ^99999: only for α below about 0.0036, e.g. |x| above 1e86 at α = 0.001)
  // the index is clamped: the key keeps its sign and order, the bucket's value its bound.
  const double i = std::ceil(std::log(a) / std::log(gamma()));
  const int32_t k = kKeyOffset + static_cast<int32_t>(std::clamp(i, -double(kKeyOffset - 1), double(kKeyOffset - 1)));
  return x > 0 ? k : -k;
}

double SketchParams::value(int32_t key) const {
  if (key == 0) return 0.0;
  const int32_t i = (key > 0 ? key : -key) - kKeyOffset;
  const double g = gamma();
  const double v = 2.0 * std::pow(g, i) / (g + 1.0);
  return key > 0 ? v : -v;
}

int64_t Distribution::cells() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void Distribution::reset(const std::vector<int64_t>& s) {
  shape = s;
  const size_t n = static_cast<size_t>(cells());
  count.assign(n, 0);
  nonfinite.assign(n, 0);
  mean.assign(n, 0.0);
  m2.assign(n, 0.0);
  min.assign(n, std::numeric_limits<double>::infinity());
  max.assign(n, -std::numeric_limits<double>::infinity());
  hist.assign(n * kHistBins, 0);
  sketch.assign(n, {});
}

namespace {

int hist_bin(double x, const HistRange& hr) {
  double v = x;
  if (hr.log10) v = x == 0 ? -std::numeric_limits<double>::infinity() : std::log10(std::fabs(x));
  const double f = (v - hr.lo) / (hr.hi - hr.lo) * kHistBins;
  if (!(f >= 0)) return 0;  // below the range (or log10 0)
  return static_cast<int>(std::min<double>(std::floor(f), kHistBins - 1));
}

}  // namespace

void Distribution::add(int64_t cell, double x, const SketchParams& sp, const HistRange& hr) {
  const size_t c = static_cast<size_t>(cell);
  if (!std::isfinite(x)) {
    ++nonfinite[c];
    return;
  }
  // Welford: the merge below with a one-value side.
  const int64_t n = ++count[c];
  const double d = x - mean[c];
  mean[c] += d / static_cast<double>(n);
  m2[c] += d * (x - mean[c]);
  min[c] = std::min(min[c], x);
  max[c] = std::max(max[c], x);
  ++hist[c * kHistBins + static_cast<size_t>(hist_bin(x, hr))];
  ++sketch[c][sp.key(x)];
}

void Distribution::merge(const Distribution& o) {
  if (o.shape != shape) throw Error("sweep statistics: cannot merge distributions of different shapes");
  for (size_t c = 0; c < count.size(); ++c) {
    nonfinite[c] += o.nonfinite[c];
    if (o.count[c] == 0) continue;
    if (count[c] == 0) {
      count[c] = o.count[c];
      mean[c] = o.mean[c];
      m2[c] = o.m2[c];
    } else {
      // Chan, Golub & LeVeque: n = na + nb, δ = mean_b − mean_a, M2 = M2a + M2b + δ² na nb / n.
      const double na = static_cast<double>(count[c]), nb = static_cast<double>(o.count[c]), n = na + nb;
      const double d = o.mean[c] - mean[c];
      mean[c] += d * nb / n;
      m2[c] += o.m2[c] + d * d * na * nb / n;
      count[c] += o.count[c];
    }
    min[c] = std::min(min[c], o.min[c]);
    max[c] = std::max(max[c], o.max[c]);
    for (size_t b = 0; b < kHistBins; ++b) hist[c * kHistBins + b] += o.hist[c * kHistBins + b];
    for (const auto& [k, v] : o.sketch[c]) sketch[c][k] += v;
  }
}

double Distribution::quantile(int64_t cell, double q, const SketchParams& sp) const {
  const size_t c = static_cast<size_t>(cell);
  if (count[c] == 0) return std::numeric_limits<double>::quiet_NaN();
  const double rank = std::clamp(q, 0.0, 1.0) * static_cast<double>(count[c] - 1);
  int64_t seen = 0;
  double v = max[c];
  for (const auto& [k, n] : sketch[c]) {
    seen += n;
    if (static_cast<double>(seen) > rank) {
      v = sp.value(k);
      break;
    }
  }
  return std::clamp(v, min[c], max[c]);
}

double Distribution::variance(int64_t cell) const {
  const size_t c = static_cast<size_t>(cell);
  return count[c] == 0 ? std::numeric_limits<double>::quiet_NaN() : m2[c] / static_cast<double>(count[c]);
}

void RouterSums::merge(const RouterSums& o) {
  if (o.moe != moe || o.experts != experts || o.top_k != top_k)
    throw Error("sweep statistics: cannot merge router sums of different shapes");
  for (size_t i = 0; i < topk_count.size(); ++i) {
    topk_count[i] += o.topk_count[i];
    prob_sum[i] += o.prob_sum[i];
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] += o.tokens[i];
    lse_sq_sum[i] += o.lse_sq_sum[i];
  }
}

// The order of this table is the file's (and the indices below).
const std::vector<InstrumentInfo>& sweep_instruments() {
  static const std::vector<InstrumentInfo> t = {
      {"attn_entropy",
       "(A_n, nh)",
       {0, 16, false},
       "entropy in nats of each head's attention row (keys and null share)"},
      {"attn_entropy_norm", "(A_n, nh)", {0, 1, false}, "attn_entropy / ln(keys + [normalizer != softmax])"},
      {"attn_first_mass",
       "(A_n, nh)",
       {0, 1, false},
       "attention weight on the first token (the key after the registers): the sink share"},
      {"attn_mass", "(A_n, nh)", {0, 1, false}, "attention mass on the keys, 1 - p_null (1 for softmax)"},
      {"ssm_delta_mean", "(M_n)", {-4, 2, true}, "mean over channels of the SSM step size delta (histogram of log10)"},
      {"rank1_distance", "(L+1)", {0, 1, false}, "distance of the residual stream to rank 1 at each depth"},
      {"resid_max_abs",
       "(L+1)",
       {-2, 6, true},
       "largest |x| of the residual stream at each depth (histogram of log10)"},
      {"logit_entropy", "()", {0, 16, false}, "entropy in nats of the next-token distribution"},
      {"router_probs", "(X_n, E)", {0, 1, false}, "router probability of each expert"},
      {"ssm_hidden_entropy",
       "(M_n, mh)",
       {0, 16, false},
       "entropy in nats of each SSM head's hidden-attention row, |M| normalised (Mamba-1: the channel mean); "
       "sweep --hidden-attention"},
      {"ssm_hidden_first_mass",
       "(M_n, mh)",
       {0, 1, false},
       "share of the hidden-attention row's |M| on the first token (the key after the registers)"},
  };
  return t;
}

namespace {
enum Ins { kAttnEntropy, kAttnEntropyNorm, kAttnFirstMass, kAttnMass, kDelta, kRank1, kResid, kLogitEntropy, kRouter,
           kHiddenEntropy, kHiddenFirstMass };
}  // namespace

int64_t sweep_ssm_heads(const LayerSchedule& s) {
  if (s.num_ssm() == 0) return 0;
  for (int64_t l : s.ssm_layers())
    if (s[l].mixer == MixerKind::Mamba1) return 1;
  return s.params().ssm.heads;
}

void SweepStats::add_hidden_row(int64_t ssm_index, int64_t head, double entropy, double first_mass) {
  Distribution& e = dists[kHiddenEntropy];
  if (e.shape.size() != 2 || ssm_index < 0 || ssm_index >= e.shape[0] || head < 0 || head >= e.shape[1])
    throw Error("sweep statistics: hidden-attention cell (" + std::to_string(ssm_index) + ", " + std::to_string(head) +
                ") outside the shape");
  const int64_t c = ssm_index * e.shape[1] + head;
  const std::vector<InstrumentInfo>& ins = sweep_instruments();
  e.add(c, entropy, sketch, ins[kHiddenEntropy].hist);
  dists[kHiddenFirstMass].add(c, first_mass, sketch, ins[kHiddenFirstMass].hist);
}

SweepStats SweepStats::for_schedule(const LayerSchedule& s, const SketchParams& sp) {
  SweepStats st;
  st.sketch = sp;
  const int64_t An = s.num_attention(), nh = s.params().attn.heads, Mn = s.num_ssm(), L = s.size(), Xn = s.num_moe();
  const int64_t E = s.params().ffn.experts, k = s.params().ffn.top_k;
  const int64_t mh = sweep_ssm_heads(s);
  const std::vector<std::vector<int64_t>> shapes = {
      {An, nh}, {An, nh}, {An, nh}, {An, nh}, {Mn}, {L + 1}, {L + 1}, {}, {Xn, Xn > 0 ? E : 0}, {Mn, mh}, {Mn, mh}};
  st.dists.resize(shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) st.dists[i].reset(shapes[i]);
  st.router.moe = Xn;
  st.router.experts = Xn > 0 ? E : 0;
  st.router.top_k = Xn > 0 ? k : 0;
  st.router.topk_count.assign(static_cast<size_t>(Xn * st.router.experts), 0);
  st.router.prob_sum.assign(static_cast<size_t>(Xn * st.router.experts), 0.0);
  st.router.tokens.assign(static_cast<size_t>(Xn), 0);
  st.router.lse_sq_sum.assign(static_cast<size_t>(Xn), 0.0);
  return st;
}

void SweepStats::add_run(const Run& run) {
  const std::vector<InstrumentInfo>& ins = sweep_instruments();
  auto addAll = [&](int i, const std::vector<float>& v) {
    Distribution& d = dists[static_cast<size_t>(i)];
    if (static_cast<int64_t>(v.size()) != d.cells()) return;  // not recorded
    for (int64_t c = 0; c < d.cells(); ++c)
      d.add(c, v[static_cast<size_t>(c)], sketch, ins[static_cast<size_t>(i)].hist);
  };
  const int64_t nReg = run.settings.registers_used;
  const int64_t heads = dists[kAttnFirstMass].cells();
  const int64_t X = router.moe, E = router.experts, k = router.top_k;
  for (size_t t = 0; t < run.records.size(); ++t) {
    const TokenTrace& r = run.records[t];
    addAll(kAttnEntropy, r.attn_entropy);
    addAll(kAttnEntropyNorm, r.attn_entropy_norm);
    addAll(kAttnMass, r.attn_mass);
    addAll(kDelta, r.ssm_delta_mean);
    addAll(kRank1, r.rank1_distance);
    addAll(kResid, r.resid_max_abs);
    addAll(kRouter, r.router_probs);
    dists[kLogitEntropy].add(0, r.logit_entropy, sketch, ins[kLogitEntropy].hist);
    // attn_rows (A_n, nh, n_reg + t + 2): the first token's key is column n_reg.
    const int64_t cols = nReg + r.position + 2;
    if (heads > 0 && static_cast<int64_t>(r.attn_rows.size()) == heads * cols)
      for (int64_t c = 0; c < heads; ++c)
        dists[kAttnFirstMass].add(c, r.attn_rows[static_cast<size_t>(c * cols + nReg)], sketch,
                                  ins[kAttnFirstMass].hist);
    if (X > 0 && static_cast<int64_t>(r.router_probs.size()) == X * E &&
        static_cast<int64_t>(r.router_topk.size()) == X * k && static_cast<int64_t>(r.router_lse.size()) == X) {
      for (int64_t x = 0; x < X; ++x) {
        for (int64_t e = 0; e < E; ++e)
          router.prob_sum[static_cast<size_t>(x * E + e)] += r.router_probs[static_cast<size_t>(x * E + e)];
        for (int64_t j = 0; j < k; ++j) {
          const int32_t e = r.router_topk[static_cast<size_t>(x * k + j)];
          if (e >= 0 && e < E) ++router.topk_count[static_cast<size_t>(x * E + e)];
        }
        const double l = r.router_lse[static_cast<size_t>(x)];
        router.lse_sq_sum[static_cast<size_t>(x)] += l * l;
        ++router.tokens[static_cast<size_t>(x)];
      }
    }
  }
  ++prompts;
  tokens += static_cast<int64_t>(run.records.size());
}

void SweepStats::merge(const SweepStats& o) {
  if (o.sketch.alpha != sketch.alpha) throw Error("sweep statistics: cannot merge sketches of different accuracy");
  if (o.dists.size() != dists.size()) throw Error("sweep statistics: cannot merge different instrument sets");
  for (size_t i = 0; i < dists.size(); ++i) dists[i].merge(o.dists[i]);
  router.merge(o.router);
  prompts += o.prompts;
  tokens += o.tokens;
}

}  // namespace hl
