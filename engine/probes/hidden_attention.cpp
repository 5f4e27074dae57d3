// The hidden attention rows of Mamba-2 layers and their collector (hidden_attention.h).
#include "engine/probes/hidden_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cpu/cpu_simd.h"
#include "engine/core/error.h"
#include "engine/core/thread_pool.h"
#include "engine/reference/ref_mamba2.h"
#include "engine/reference/ref_ops.h"

namespace hl {

namespace {

// Mamba-1 channel d (Jamba): out[s] = Δ_{s,d} Σ_n C_t[n] B_s[n] exp(A[d, n] cum_s), cum_s = Σ_{r=s+1..t} Δ_{r,d},
// from Bt (N, t+1), the B rows transposed, and C_t. The T·N decays go through the CPU kernels' vector
// exp in one call; the sums over n run along s (independent lanes).
void mamba1_row(const SsmRows& in, int64_t d, int64_t t, const float* Bt, const float* Ct, std::vector<float>& work,
                float* out) {
  const int64_t N = in.N, n = t + 1;
  work.resize(static_cast<size_t>((N + 1) * n));
  float* E = work.data();          // (N, n) decays
  float* cum = work.data() + N * n;  // (n,)
  double c = 0;
  for (int64_t s = t; s >= 0; --s) {
    cum[s] = static_cast<float>(c);
    c += in.delta[static_cast<size_t>(s * in.nh + d)];
  }
  // A decay below exp(kUnderflow) ≈ 1.6e-38 is float underflow: its keys are taken as 0 and not
  // computed. A < 0 and cum falls with s, so the keys kept are a suffix [lo, t] per state entry: on a
  // long context most of a fast-decaying entry's row is skipped.
  constexpr float kUnderflow = -87.0f;
  const float* A = &in.A[static_cast<size_t>(d * N)];
  std::fill(out, out + n, 0.0f);
  for (int64_t k = 0; k < N; ++k) {
    const float a = A[k];
    const int64_t lo = a < 0 ? std::partition_point(cum, cum + n, [&](float c) { return a * c < kUnderflow; }) - cum : 0;
    float* e = E + k * n;
    for (int64_t s = lo; s < n; ++s) e[s] = a * cum[s];
    cpu::simd::kernels().exp(e + lo, n - lo);
    const float ck = Ct[k];
    const float* b = Bt + k * n;
    for (int64_t s = lo; s < n; ++s) out[s] += ck * b[s] * e[s];
  }
  for (int64_t s = 0; s < n; ++s) out[s] *= in.delta[static_cast<size_t>(s * in.nh + d)];
}

// The B rows 0..t of a Mamba-1 layer transposed to (N, t+1).
std::vector<float> b_transposed(const SsmRows& in, int64_t t) {
  const int64_t N = in.N, n = t + 1;
  std::vector<float> Bt(static_cast<size_t>(N * n));
  for (int64_t s = 0; s < n; ++s)
    for (int64_t k = 0; k < N; ++k) Bt[static_cast<size_t>(k * n + s)] = in.B[static_cast<size_t>(s * N + k)];
  return Bt;
}

}  // namespace

void hidden_attention_mean_abs_row(const SsmRows& in, int64_t t, float* out) {
  const int64_t n = t + 1;
  const int threads = static_cast<int>(ThreadPool::global().size());
  std::vector<std::vector<double>> acc(static_cast<size_t>(threads), std::vector<double>(static_cast<size_t>(n), 0.0));
  const std::vector<float> Bt = in.mamba1 ? b_transposed(in, t) : std::vector<float>();
  ThreadPool::global().parallel_for(in.nh, 1, [&](int64_t h0, int64_t h1) {
    std::vector<double>& a = acc[static_cast<size_t>(ThreadPool::thread_index())];
    std::vector<float> row(static_cast<size_t>(n)), work;
    for (int64_t h = h0; h < h1; ++h) {
      if (in.mamba1)
        mamba1_row(in, h, t, Bt.data(), &in.C[static_cast<size_t>(t * in.N)], work, row.data());
      else
        hidden_attention_row(in, h, t, row.data());
      for (int64_t s = 0; s < n; ++s) a[static_cast<size_t>(s)] += std::fabs(row[static_cast<size_t>(s)]);
    }
  });
  for (int64_t s = 0; s < n; ++s) {
    double sum = 0;
    for (const std::vector<double>& a : acc) sum += a[static_cast<size_t>(s)];
    out[s] = static_cast<float>(sum / static_cast<double>(in.nh));
  }
}

void hidden_attention_row(const SsmRows& in, int64_t h, int64_t t, float* out) {
  if (in.mamba1) {
    std::vector<float> work;
    return mamba1_row(in, h, t, b_transposed(in, t).data(), &in.C[static_cast<size_t>(t * in.N)], work, out);
  }
  // A Mamba-2 head: the reference's row (ref_mamba2.h), from the same layout (rows, nh) / (rows, G·N).
  ref::Mamba2Dims d;
  d.nh = in.nh;
  d.N = in.N;
  d.G = in.G;
  std::vector<double> row(static_cast<size_t>(t + 1));
  ref::mamba2_hidden_attention_row(d, in.delta.data(), in.B.data(), in.C.data(), in.A.data(), h, t, row.data());
  for (int64_t s = 0; s <= t; ++s) out[s] = static_cast<float>(row[static_cast<size_t>(s)]);
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

void hidden_attention_head_or_mean_row(const SsmRows& in, int64_t head, int64_t t, float* out) {
  if (head < 0)
    hidden_attention_mean_abs_row(in, t, out);
  else
    hidden_attention_row(in, head, t, out);
}

int64_t hidden_attention_window_start(const SsmRows& in, int64_t head, int64_t r1, double budget) {
  const double per_key = static_cast<double>(in.N) * static_cast<double>(head < 0 ? in.nh : 1);
  double spent = per_key * static_cast<double>(r1 + 1);
  int64_t r0 = r1;
  while (r0 > 0 && spent + per_key * static_cast<double>(r0) <= budget) spent += per_key * static_cast<double>(r0--);
  return r0;
}

HiddenAttentionCollector::HiddenAttentionCollector(std::shared_ptr<const Model> model) : model_(std::move(model)) {
  const JambaConfig& c = model_->config;
  layers_.resize(static_cast<size_t>(model_->schedule.num_ssm()));
  for (int64_t i : model_->schedule.ssm_layers()) {
    const LayerSpec& l = model_->schedule[i];
    SsmRows& r = layers_[static_cast<size_t>(l.ssm_index)];
    if (l.mixer == MixerKind::Mamba1) {  // Jamba: the channels are the heads, A (Di, N)
      r.mamba1 = true;
      r.nh = c.mamba_inner();
      r.N = c.mamba_d_state;
      r.A = model_->w.layers[static_cast<size_t>(i)].mamba.A;
      continue;
    }
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
    if (r.mamba1 && conv) {  // B, C (N each) from u: Jamba's x_proj rows [R, R + 2N), then its B and C norms
      if (im.cols != Di) throw Error("hidden attention: ssm_conv of layer " + std::to_string(im.layer) + " has " +
                                     std::to_string(im.cols) + " values a row, expected " + std::to_string(Di));
      const MambaWeights& w = model_->w.layers[static_cast<size_t>(im.layer)].mamba;
      const int64_t R = model_->config.mamba_dt_rank;
      Mat bc = w.x_proj;  // the view of its B and C rows
      bc.data = w.x_proj.row_ptr(R);
      bc.rows = 2 * r.N;
      std::vector<float> p(static_cast<size_t>(2 * r.N)), out(static_cast<size_t>(r.N));
      ref::linear(bc, row, p.data());
      const double eps = model_->config.rms_norm_eps;
      ref::rmsnorm(p.data(), w.b_norm.data(), r.N, eps, out.data());
      r.B.insert(r.B.end(), out.begin(), out.end());
      ref::rmsnorm(p.data() + r.N, w.c_norm.data(), r.N, eps, out.data());
      r.C.insert(r.C.end(), out.begin(), out.end());
    } else if (delta) {
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
  return layers_[static_cast<size_t>(ssm_index)];
}

HiddenAttentionTracker::HiddenAttentionTracker(std::shared_ptr<const Model> model, const RunOptions& opts)
    : HiddenAttentionTracker(std::move(model), opts, nullptr, {}) {}

HiddenAttentionTracker::HiddenAttentionTracker(std::shared_ptr<const Model> model, const RunOptions& opts,
                                               StageLink* link, std::vector<LayerRange> ranges)
    : collect_(model) {
  auto cpu = std::make_unique<cpu::CpuBackend>(std::move(model), link, std::move(ranges));
  cpu->set_observer(collect_.observer());
  RunOptions o = opts;  // the records are not kept: only the intermediates matter
  o.instruments = false;
  o.full = false;
  cpu->start(o);  // the register rows come first
  backend_ = std::move(cpu);
}

HiddenAttentionTracker::~HiddenAttentionTracker() = default;

void HiddenAttentionTracker::follow(const int32_t* ids, int64_t n) {
  const int64_t have = backend_->position();
  if (n <= have) return;
  std::vector<TokenTrace> records;
  backend_->forward(ids + have, n - have, &records);
}

int64_t HiddenAttentionTracker::fed() const {
  return backend_->position();
}

int HiddenAttentionTracker::registers() const {
  return backend_->registers();
}

}  // namespace hl
