// The CUDA backend's per-element math (engine/backend/cuda/cuda_math.h, `__host__ __device__`
// functions) run on the host and checked against the CPU reference backend's own functions and
// closed forms: every bf16/fp16 bit pattern widened, SiLU, relu² and softplus, the RMSNorm factor,
// the attention normalizers and row instruments, the scan update (sequential and the chunked
// parallel composition the prefill kernels use), Mamba-2's Δ, channel update and gated norm, the
// RoPE pair, the router and the rank-to-1 distance. Needs no toolkit and no device: built by the C++
// compiler into hl_engine_tests (and into hl_cuda_tests).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/cpu/cpu_simd.h"
#include "engine/backend/cpu/cpu_ssd.h"
#include "engine/backend/cuda/cuda_math.h"
#include "engine/core/dtype.h"
#include "engine/core/ggml_quant.h"
#include "engine/probes/attention_probe.h"
#include "engine/probes/rank1.h"
#include "engine/probes/router_probe.h"
#include "engine/reference/ref_mamba2.h"

using namespace hl;

namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

std::vector<float> randoms(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

}  // namespace

TEST(CudaMath, WidensEveryBf16AndF16PatternExactly) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t b = static_cast<uint16_t>(h);
    ASSERT_EQ(bits(cudam::bf16_to_float(b)), bits(bf16_to_float(b))) << "bf16 0x" << std::hex << h;
    const float want = f16_to_float(b), got = cudam::f16_to_float(b);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << "f16 0x" << std::hex << h;
      continue;
    }
    ASSERT_EQ(bits(got), bits(want)) << "f16 0x" << std::hex << h;
  }
  // widen() by dtype code, against core/dtype.h's to_float on a row of each type.
  const std::vector<float> src = randoms(37, -3, 3, 1);
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    std::vector<uint8_t> raw(src.size() * 4);
    from_float(t, src.data(), raw.data(), src.size());
    std::vector<float> ref(src.size());
    to_float(t, raw.data(), ref.data(), src.size());
    const int code = t == DType::F32 ? cudam::kF32 : t == DType::F16 ? cudam::kF16 : cudam::kBF16;
    for (size_t i = 0; i < src.size(); ++i)
      EXPECT_EQ(cudam::widen(code, raw.data(), static_cast<int64_t>(i)), ref[i]) << dtype_name(t) << " " << i;
  }
}

TEST(CudaMath, SiluAndSoftplusMatchTheCpuReference) {
  std::vector<float> x = randoms(4000, -40, 40, 2);
  for (float v : {0.0f, -0.0f, 20.0f, 20.000002f, 19.999998f, -87.0f, 88.0f, 1e-30f}) x.push_back(v);
  std::vector<float> s = x, sp = x;
  cpu::simd::portable().silu(s.data(), static_cast<int64_t>(s.size()));
  cpu::simd::portable().softplus(sp.data(), static_cast<int64_t>(sp.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(cudam::silu(x[i]), s[i]) << "silu(" << x[i] << ")";
    EXPECT_EQ(cudam::softplus(x[i]), sp[i]) << "softplus(" << x[i] << ")";
  }
  EXPECT_EQ(cudam::softplus(25.0f), 25.0f);  // the threshold: identity above 20
}

// relu(v)² of Nemotron-H's MLP: the CPU's relu2_mlp operations (v > 0 ? v : 0, squared) exactly.
TEST(CudaMath, Relu2MatchesTheCpuMlp) {
  std::vector<float> x = randoms(1000, -30, 30, 39);
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e20f}) x.push_back(v);
  for (float v : x) {
    const float r = v > 0.0f ? v : 0.0f;
    EXPECT_EQ(cudam::relu2(v), r * r) << v;
  }
  EXPECT_EQ(cudam::relu2(-3.0f), 0.0f);
  EXPECT_EQ(cudam::relu2(3.0f), 9.0f);
}

TEST(CudaMath, RmsNormFactorMatchesTheCpuRmsnorm) {
  for (int64_t n : {1, 4, 33, 512}) {
    const std::vector<float> x = randoms(static_cast<size_t>(n), -5, 5, static_cast<uint32_t>(n));
    const std::vector<float> w = randoms(static_cast<size_t>(n), 0.5f, 1.5f, static_cast<uint32_t>(n + 1));
    std::vector<float> ref(static_cast<size_t>(n));
    cpu::rmsnorm(x.data(), w.data(), 1, n, 1e-6, ref.data());
    double ss = 0;
    for (float v : x) ss += static_cast<double>(v) * v;
    const float inv = cudam::rms_inv(ss, n, 1e-6);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(cudam::rms_scale(w[i], x[i], inv), ref[i]) << n << " " << i;
  }
}

// The attention kernel's reductions, done in the kernel's terms, against probes/attention_probe.
TEST(CudaMath, AttentionNormalizersAndInstrumentsMatchTheProbe) {
  for (int norm = 0; norm < 3; ++norm) {
    for (int64_t n : {1, 2, 7, 300}) {
      std::vector<float> z = randoms(static_cast<size_t>(n), -8, 8, static_cast<uint32_t>(n * 3 + norm));
      if (n == 7) z[3] = 60.0f;  // one dominant key: entropy near 0, clamped
      const float sink = 1.25f;
      std::vector<float> p_ref(static_cast<size_t>(n));
      AttnRowStats ref;
      attention_row(z.data(), n, static_cast<Normalizer>(norm), sink, p_ref.data(), &ref);
      // Kernel order: max and max |z|, e^(z−m) with an fp64 sum, then p, mass and weighted sums.
      const float zn = cudam::attn_null_logit(norm, sink);
      float m = -INFINITY, mabs = 0;
      for (float v : z) {
        m = std::fmax(m, v);
        mabs = std::fmax(mabs, std::fabs(v));
      }
      if (cudam::attn_has_null(norm)) m = std::fmax(m, zn);
      std::vector<float> p(static_cast<size_t>(n));
      double den = 0;
      for (int64_t j = 0; j < n; ++j) {
        p[j] = std::exp(z[j] - m);
        den += p[j];
      }
      const double e_null = cudam::attn_has_null(norm) ? std::exp(static_cast<double>(zn) - m) : 0.0;
      den += e_null;
      double mass = 0, weighted = 0;
      for (int64_t j = 0; j < n; ++j) {
        p[j] = static_cast<float>(p[j] * (1.0 / den));
        mass += p[j];
        weighted += static_cast<double>(p[j]) * (static_cast<double>(z[j]) - m);
      }
      const cudam::AttnStats st = cudam::attn_finish(norm, den, e_null, zn, m, mass, weighted, mabs, n);
      for (int64_t j = 0; j < n; ++j) EXPECT_EQ(p[j], p_ref[j]) << "norm " << norm << " n " << n << " key " << j;
      EXPECT_NEAR(st.entropy, ref.entropy, 1e-6) << norm << " " << n;
      EXPECT_NEAR(st.entropy_norm, ref.entropy_norm, 1e-6) << norm << " " << n;
      EXPECT_NEAR(st.mass, ref.mass, 1e-6) << norm << " " << n;
      EXPECT_NEAR(st.p_null, ref.p_null, 1e-7) << norm << " " << n;
      EXPECT_EQ(st.max_abs_logit, ref.max_abs_logit);
      if (norm == 0) EXPECT_EQ(st.mass, 1.0f);
    }
  }
}

namespace {

struct ScanCase {
  int64_t S = 150, Di = 20, N = 8;
  std::vector<float> dt, u, z, B, C, A, D;  // A (Di, N) as the model stores it
  ScanCase() {
    dt = randoms(static_cast<size_t>(S * Di), 0.001f, 0.3f, 11);
    u = randoms(static_cast<size_t>(S * Di), -2, 2, 12);
    z = randoms(static_cast<size_t>(S * Di), -3, 3, 13);
    B = randoms(static_cast<size_t>(S * N), -1, 1, 14);
    C = randoms(static_cast<size_t>(S * N), -1, 1, 15);
    A = randoms(static_cast<size_t>(Di * N), -4, -0.1f, 16);
    D = randoms(static_cast<size_t>(Di), -1, 1, 17);
  }
  // The CPU reference scan (cpu_simd.h) from a given state (Di, N); returns out and retained.
  void reference(std::vector<float>& h, std::vector<float>& out, std::vector<float>& ret) const {
    std::vector<float> At(static_cast<size_t>(cpu::simd::tiled_size(Di, N)), 0.0f);
    std::vector<float> ht(At.size(), 0.0f);
    for (int64_t d = 0; d < Di; ++d)
      for (int64_t n = 0; n < N; ++n) {
        At[cpu::simd::tile_index(d, n, N)] = A[d * N + n];
        ht[cpu::simd::tile_index(d, n, N)] = h[d * N + n];
      }
    out.assign(static_cast<size_t>(S * Di), 0.0f);
    ret.assign(static_cast<size_t>(S * Di), 0.0f);
    cpu::simd::ScanArgs a;
    a.S = S;
    a.Di = Di;
    a.N = N;
    a.dt = dt.data();
    a.u = u.data();
    a.z = z.data();
    a.z_stride = Di;
    a.B = B.data();
    a.C = C.data();
    a.A = At.data();
    a.D = D.data();
    a.h = ht.data();
    a.out = out.data();
    a.retained = ret.data();
    cpu::simd::scan_portable(a, 0, Di);
    for (int64_t d = 0; d < Di; ++d)
      for (int64_t n = 0; n < N; ++n) h[d * N + n] = ht[cpu::simd::tile_index(d, n, N)];
  }
  // The kernel's scan_range over tokens [s0, s1) of channel d from state h (N lanes).
  void kernel_range(float* h, int64_t s0, int64_t s1, int64_t d, std::vector<float>& out,
                    std::vector<float>& ret) const {
    for (int64_t s = s0; s < s1; ++s) {
      float acc = 0, keep = 0;
      for (int64_t n = 0; n < N; ++n) {
        keep += cudam::scan_update(h[n], dt[s * Di + d], A[d * N + n], B[s * N + n], u[s * Di + d]);
        acc += h[n] * C[s * N + n];
      }
      out[s * Di + d] = cudam::scan_output(acc, D[d], u[s * Di + d], z[s * Di + d]);
      ret[s * Di + d] = keep / static_cast<float>(N);
    }
  }
};

}  // namespace

TEST(CudaMath, ScanUpdateMatchesTheCpuScanExactly) {
  const ScanCase c;
  std::vector<float> h0 = randoms(static_cast<size_t>(c.Di * c.N), -1, 1, 18);
  std::vector<float> h_ref = h0, out_ref, ret_ref;
  c.reference(h_ref, out_ref, ret_ref);
  std::vector<float> out(out_ref.size()), ret(ret_ref.size());
  for (int64_t d = 0; d < c.Di; ++d) {
    std::vector<float> h(h0.begin() + d * c.N, h0.begin() + (d + 1) * c.N);
    c.kernel_range(h.data(), 0, c.S, d, out, ret);
    for (int64_t n = 0; n < c.N; ++n) EXPECT_EQ(h[n], h_ref[d * c.N + n]) << d << " " << n;
  }
  EXPECT_EQ(out, out_ref);
  EXPECT_EQ(ret, ret_ref);
}

// The three passes of the chunked parallel prefill scan (chunk-local scans from zero with their decay
// products, the carries, each chunk from its carried-in state) agree with the sequential scan.
TEST(CudaMath, ChunkedParallelScanCompositionMatchesSequential) {
  const ScanCase c;
  std::vector<float> h0 = randoms(static_cast<size_t>(c.Di * c.N), -1, 1, 19);
  std::vector<float> h_ref = h0, out_ref, ret_ref;
  c.reference(h_ref, out_ref, ret_ref);
  for (int64_t T : {1, 7, 64, 149, 150}) {
    const int64_t chunks = (c.S + T - 1) / T;
    std::vector<float> out(out_ref.size()), ret(ret_ref.size());
    for (int64_t d = 0; d < c.Di; ++d) {
      std::vector<float> carry(static_cast<size_t>(chunks * c.N));
      for (int64_t n = 0; n < c.N; ++n) {
        float h = h0[d * c.N + n];
        for (int64_t k = 0; k < chunks; ++k) {
          float loc = 0, prod = 1;  // pass 1
          for (int64_t s = k * T; s < std::min(c.S, (k + 1) * T); ++s)
            prod *= cudam::scan_update(loc, c.dt[s * c.Di + d], c.A[d * c.N + n], c.B[s * c.N + n], c.u[s * c.Di + d]);
          carry[k * c.N + n] = h;  // pass 2
          h = prod * h + loc;
        }
        EXPECT_NEAR(h, h_ref[d * c.N + n], 1e-5 * (1 + std::fabs(h_ref[d * c.N + n]))) << "final state, T " << T;
      }
      for (int64_t k = 0; k < chunks; ++k)  // pass 3
        c.kernel_range(&carry[k * c.N], k * T, std::min(c.S, (k + 1) * T), d, out, ret);
    }
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_NEAR(out[i], out_ref[i], 1e-5 * (1 + std::fabs(out_ref[i]))) << "T " << T << " at " << i;
      ASSERT_EQ(ret[i], ret_ref[i]) << "T " << T << " at " << i;
    }
  }
}

// Mamba-2's Δ: the CPU's softplus then std::clamp (cpu_mamba2.cpp), exactly, NaN included; the fp64
// reference (ref_mamba2.h mamba2_delta) within float rounding.
TEST(CudaMath, Mamba2DeltaMatchesTheCpuClampExactly) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> dt = randoms(2000, -30, 30, 30);
  for (float v : {0.0f, 19.5f, 20.5f, -100.0f, std::numeric_limits<float>::quiet_NaN()}) dt.push_back(v);
  const std::vector<float> bias = randoms(dt.size(), -2, 2, 31);
  for (auto [lo, hi] : {std::pair{0.0f, inf}, std::pair{0.02f, inf}, std::pair{0.001f, 0.1f}}) {
    std::vector<float> sp(dt.size()), want(dt.size());
    for (size_t i = 0; i < dt.size(); ++i) sp[i] = dt[i] + bias[i];
    cpu::simd::portable().softplus(sp.data(), static_cast<int64_t>(sp.size()));
    ref::Mamba2Dims d;
    d.nh = static_cast<int64_t>(dt.size());
    d.dt_min = lo;
    d.dt_max = hi;
    ref::mamba2_delta(d, dt.data(), bias.data(), want.data());
    for (size_t i = 0; i < dt.size(); ++i) {
      const float got = cudam::mamba2_delta(dt[i], bias[i], lo, hi);
      if (std::isnan(sp[i])) {
        EXPECT_TRUE(std::isnan(got)) << "dt " << dt[i];
        continue;
      }
      EXPECT_EQ(got, std::clamp(sp[i], lo, hi)) << "dt " << dt[i] << " lo " << lo << " hi " << hi;
      EXPECT_NEAR(got, want[i], 1e-6 * (1 + std::fabs(want[i]))) << "dt " << dt[i];
    }
  }
}

// One Mamba-2 head through S tokens, channel by channel with the kernel's state layout (N, P): the
// CPU's token-order scan (cpu_ssd.h scan_in_order, which its decode step and short blocks run)
// exactly, outputs, retained shares and final state; the fp64 reference's steps within 1e-5.
TEST(CudaMath, Mamba2ChannelMatchesTheCpuTokenOrderScanExactly) {
  const int64_t S = 23, P = 4, N = 8, ld = P + 2 * N;  // token rows x (P) | B (N) | C (N)
  const std::vector<float> row = randoms(static_cast<size_t>(S * ld), -1.5f, 1.5f, 32);
  std::vector<float> dl = randoms(static_cast<size_t>(S), 0.001f, 0.9f, 33);
  const float a = -1.7f, Dh = 0.6f;
  const std::vector<float> s0 = randoms(static_cast<size_t>(P * N), -1, 1, 34);  // (P, N) as the CPU keeps it
  std::vector<float> s_cpu = s0, y_cpu(static_cast<size_t>(S * P)), r_cpu(static_cast<size_t>(S));
  cpu::scan_in_order(S, P, N, ld, P, row.data(), row.data() + P, row.data() + P + N, dl.data(), 1, a, Dh, s_cpu.data(),
                     y_cpu.data(), r_cpu.data());
  std::vector<float> st(static_cast<size_t>(N * P));  // (N, P): lanes at stride P, as the kernel's (N, Di)
  for (int64_t p = 0; p < P; ++p)
    for (int64_t n = 0; n < N; ++n) st[n * P + p] = s0[p * N + n];
  // The reference: one head of P channels, B and C of one group; dt chosen so that Δ = dl after the
  // softplus (dt_bias 0, no clamp): dt = log(expm1(Δ)).
  std::vector<float> s_ref = s0, y_ref(static_cast<size_t>(P));
  ref::Mamba2Dims d;
  d.nh = 1;
  d.P = P;
  d.N = N;
  const float zero = 0.0f;
  for (int64_t s = 0; s < S; ++s) {
    const float* x = &row[s * ld];
    const float dA = cudam::mamba2_decay(dl[s], a);
    EXPECT_EQ(dA, r_cpu[s]) << "token " << s;
    for (int64_t p = 0; p < P; ++p) {
      const float y = cudam::mamba2_channel(&st[p], P, static_cast<int>(N), dA, dl[s], x[p], x + P, x + P + N, Dh);
      EXPECT_EQ(y, y_cpu[s * P + p]) << "token " << s << " channel " << p;
    }
    const float dt = static_cast<float>(std::log(std::expm1(static_cast<double>(dl[s]))));
    ref::mamba2_step(d, ref::Mamba2Token{x, x + P, x + P + N, &dt}, &zero, &a, &Dh, s_ref.data(), y_ref.data(),
                     nullptr);
    for (int64_t p = 0; p < P; ++p)
      EXPECT_NEAR(y_cpu[s * P + p], y_ref[p], 1e-5 * (1 + std::fabs(y_ref[p]))) << "token " << s << " channel " << p;
  }
  for (int64_t p = 0; p < P; ++p)
    for (int64_t n = 0; n < N; ++n) EXPECT_EQ(st[n * P + p], s_cpu[p * N + n]) << p << " " << n;
}

// The gated RMSNorm after the gate over groups (Nemotron-H's Di / G, Bamba's Di), in the kernel's
// terms (gated_value, the fp64 Σv², rms_inv, rms_scale): the CPU's order (silu_mul, then the group
// RMS, cpu_mamba2.cpp) exactly; the reference's gated_rmsnorm within float rounding.
TEST(CudaMath, GatedNormMatchesTheCpuOrderExactly) {
  const int64_t Di = 96;
  const std::vector<float> y = randoms(Di, -3, 3, 35), z = randoms(Di, -6, 6, 36), w = randoms(Di, 0.5f, 1.5f, 37);
  for (int64_t group : {Di, Di / 2, Di / 3}) {
    std::vector<float> v = z, want = y;
    cpu::simd::portable().silu_mul(v.data(), y.data(), Di);  // v = silu(z)·y
    ref::gated_rmsnorm(want.data(), z.data(), w.data(), Di, group, 1e-6);
    for (int64_t g0 = 0; g0 < Di; g0 += group) {
      double ss = 0, ss_cpu = 0;
      for (int64_t c = g0; c < g0 + group; ++c) {
        const float gv = cudam::gated_value(y[c], z[c]);
        EXPECT_EQ(gv, v[c]) << c;
        ss += static_cast<double>(gv) * gv;
        ss_cpu += static_cast<double>(v[c]) * v[c];
      }
      const float inv = cudam::rms_inv(ss, group, 1e-6);
      const float inv_cpu = static_cast<float>(1.0 / std::sqrt(ss_cpu / static_cast<double>(group) + 1e-6));
      EXPECT_EQ(inv, inv_cpu) << "group " << group;
      for (int64_t c = g0; c < g0 + group; ++c) {
        const float got = cudam::rms_scale(w[c], cudam::gated_value(y[c], z[c]), inv);
        EXPECT_EQ(got, w[c] * (v[c] * inv_cpu)) << c;
        EXPECT_NEAR(got, want[c], 1e-5 * (1 + std::fabs(want[c]))) << c;
      }
    }
  }
}

// One RoPE pair: the CPU attention's rotation (cos and sin of pos·inv_freq in double, rounded to
// float; x1·cos − x2·sin, x2·cos + x1·sin) exactly; position 0 leaves the pair as it is; (1, 0) turns
// into (cos, sin); lengths are kept within float rounding.
TEST(CudaMath, RopePairMatchesTheCpuRotationExactly) {
  const std::vector<float> x = randoms(64, -4, 4, 38);
  for (int64_t pos : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{65537}})
    for (int64_t i = 0; i < 16; ++i) {
      const double angle = static_cast<double>(pos) * std::pow(10000.0, -2.0 * static_cast<double>(i) / 32.0);
      const float cs = static_cast<float>(std::cos(angle)), sn = static_cast<float>(std::sin(angle));
      float x1 = x[2 * i], x2 = x[2 * i + 1];
      cudam::rope_pair(x1, x2, angle);
      EXPECT_EQ(x1, x[2 * i] * cs - x[2 * i + 1] * sn) << pos << " " << i;
      EXPECT_EQ(x2, x[2 * i + 1] * cs + x[2 * i] * sn) << pos << " " << i;
      const double len0 = std::hypot(x[2 * i], x[2 * i + 1]);
      EXPECT_NEAR(std::hypot(x1, x2), len0, 1e-6 * (1 + len0)) << pos << " " << i;
      if (pos == 0) {
        EXPECT_EQ(x1, x[2 * i]);
        EXPECT_EQ(x2, x[2 * i + 1]);
      }
      float u1 = 1.0f, u2 = 0.0f;
      cudam::rope_pair(u1, u2, angle);
      EXPECT_EQ(u1, cs);
      EXPECT_EQ(u2, sn);
    }
}

TEST(CudaMath, RouterMatchesTheProbeIncludingTies) {
  for (int E : {1, 4, 8, 16}) {
    for (int K = 1; K <= std::min(E, 4); ++K) {
      std::vector<float> logits = randoms(static_cast<size_t>(E), -3, 3, static_cast<uint32_t>(E * 10 + K));
      if (E >= 4) logits[1] = logits[3];  // a tie: the lower index first
      std::vector<float> p_ref(static_cast<size_t>(E)), p(static_cast<size_t>(E));
      std::vector<int32_t> t_ref(static_cast<size_t>(K)), t(static_cast<size_t>(K));
      const float lse_ref = route(logits.data(), E, K, p_ref.data(), t_ref.data());
      const float lse = cudam::route(logits.data(), E, K, p.data(), t.data());
      EXPECT_EQ(lse, lse_ref);
      EXPECT_EQ(p, p_ref);
      EXPECT_EQ(t, t_ref);
      std::vector<int32_t> sorted = t;
      cudam::sort_ascending(sorted.data(), K);
      EXPECT_TRUE(std::is_sorted(sorted.begin(), sorted.end()));
      std::sort(t.begin(), t.end());
      EXPECT_EQ(sorted, t);
    }
  }
}

// Nemotron-H's grouped sigmoid router (with and without the correction bias, groups, renormalised,
// scaled) against the probe's, bit for bit, ties included; the weights follow their experts when
// sorted into ascending index.
TEST(CudaMath, SigmoidRouterMatchesTheProbe) {
  struct Case {
    int E, K, groups, topk_groups;
    bool renorm, bias;
    double scale;
  };
  for (const Case& c : {Case{8, 2, 1, 1, true, true, 1.0}, Case{16, 4, 4, 2, true, true, 2.5},
                        Case{16, 3, 8, 3, false, false, 1.0}, Case{12, 6, 3, 1, true, false, 0.7}, Case{4, 1, 2, 2, false, true, 1.0}}) {
    SCOPED_TRACE(std::to_string(c.E) + " experts, " + std::to_string(c.groups) + " groups");
    std::vector<float> logits = randoms(static_cast<size_t>(c.E), -3, 3, static_cast<uint32_t>(c.E * 7 + c.K));
    logits[1] = logits[2];  // a tie
    const std::vector<float> bias = randoms(static_cast<size_t>(c.E), -0.5, 0.5, static_cast<uint32_t>(c.E + 99));
    const float* b = c.bias ? bias.data() : nullptr;
    std::vector<float> p_ref(static_cast<size_t>(c.E)), p(p_ref.size()), w_ref(static_cast<size_t>(c.K)), w(w_ref.size());
    std::vector<int32_t> t_ref(static_cast<size_t>(c.K)), t(t_ref.size()), gbest(static_cast<size_t>(c.topk_groups));
    std::vector<float> choice(static_cast<size_t>(c.E)), gscore(static_cast<size_t>(c.groups));
    const float lse_ref = route_sigmoid(logits.data(), b, c.E, c.K, c.groups, c.topk_groups, c.renorm, c.scale,
                                        p_ref.data(), t_ref.data(), w_ref.data());
    const float lse = cudam::route_sigmoid(logits.data(), b, c.E, c.K, c.groups, c.topk_groups, c.renorm, c.scale,
                                           p.data(), t.data(), w.data(), choice.data(), gscore.data(), gbest.data());
    EXPECT_EQ(lse, lse_ref);
    EXPECT_EQ(p, p_ref);
    EXPECT_EQ(t, t_ref);
    EXPECT_EQ(w, w_ref);
    std::vector<int32_t> sorted = t;
    std::vector<float> ws = w;
    cudam::sort_ascending(sorted.data(), c.K, ws.data());
    EXPECT_TRUE(std::is_sorted(sorted.begin(), sorted.end()));
    for (int j = 0; j < c.K; ++j) {
      const auto at = std::find(t.begin(), t.end(), sorted[static_cast<size_t>(j)]) - t.begin();
      EXPECT_EQ(ws[static_cast<size_t>(j)], w[static_cast<size_t>(at)]);
    }
  }
}

// Welford in the rank-to-1 kernel's terms (fp64, Kahan row norms) against probes/rank1.
TEST(CudaMath, Rank1DistanceMatchesTheTracker) {
  const int64_t H = 48;
  Rank1Tracker ref(H);
  std::vector<double> mean(static_cast<size_t>(H), 0.0);
  double m2 = 0, sq = 0, sqc = 0;
  for (int64_t t = 0; t < 40; ++t) {
    std::vector<float> x = randoms(static_cast<size_t>(H), -2, 2, static_cast<uint32_t>(100 + t));
    if (t % 7 == 3)
      for (float& v : x) v += 5.0f;  // a shifted row
    const float want = ref.add(x.data());
    const double n = static_cast<double>(t + 1), inv_n = 1.0 / n;
    double dm2 = 0, s2 = 0;
    for (int64_t i = 0; i < H; ++i) {
      const double xi = x[i], delta = xi - mean[i];
      mean[i] += delta * inv_n;
      dm2 += delta * (xi - mean[i]);
      s2 += xi * xi;
    }
    m2 += dm2;
    const double y = s2 - sqc, tt = sq + y;
    sqc = (tt - sq) - y;
    sq = tt;
    EXPECT_NEAR(cudam::rank1_distance(m2, sq, t + 1), want, 1e-6) << "row " << t;
  }
  EXPECT_EQ(cudam::rank1_distance(0, 1, 1), 0.0f);
  EXPECT_EQ(cudam::rank1_distance(1, 0, 5), 0.0f);
}

// ggml's block formats as the kernels read them (cudam::widen → dequant): every element of quantised
// rows and of random bytes (any scale, NaN and infinities included) bit for bit as core/dtype.h's
// to_float (ggml's dequantize_row_*), with a zero row for the signed zeros; row starts by elem_bytes.
TEST(CudaMath, DequantisesEveryBlockFormatAsGgml) {
  const std::pair<DType, int> formats[] = {{DType::Q8_0, cudam::kQ8_0}, {DType::Q4_0, cudam::kQ4_0},
                                           {DType::Q5_0, cudam::kQ5_0}, {DType::Q5_1, cudam::kQ5_1},
                                           {DType::Q4_K, cudam::kQ4_K}, {DType::Q5_K, cudam::kQ5_K},
                                           {DType::Q6_K, cudam::kQ6_K}};
  constexpr int64_t kRows = 4, kCols = 512;
  std::vector<float> src = randoms(kRows * kCols, -2, 2, 7);
  std::fill(src.begin() + kCols, src.begin() + 2 * kCols, 0.0f);  // row 1: all zeros
  std::mt19937 rng(9);
  for (const auto& [t, code] : formats) {
    SCOPED_TRACE(dtype_name(t));
    EXPECT_EQ(cudam::block_elems(code), dtype_block(t));
    EXPECT_EQ(cudam::block_bytes(code), dtype_block_bytes(t));
    const int64_t row = dtype_row_bytes(t, kCols);
    for (int64_t r = 0; r < kRows; ++r) EXPECT_EQ(cudam::elem_bytes(code, r * kCols), r * row);
    std::vector<uint8_t> quantised(static_cast<size_t>(kRows * row)), random(quantised.size());
    ggml_quantize_row(dtype_ggml_type(t), src.data(), quantised.data(), kRows * kCols);
    for (uint8_t& b : random) b = static_cast<uint8_t>(rng());
    for (const std::vector<uint8_t>* raw : {&quantised, &random}) {
      std::vector<float> want(src.size());
      to_float(t, raw->data(), want.data(), want.size());
      for (int64_t r = 0; r < kRows; ++r) {
        const uint8_t* start = raw->data() + cudam::elem_bytes(code, r * kCols);
        for (int64_t i = 0; i < kCols; ++i) {
          const float w = want[static_cast<size_t>(r * kCols + i)], got = cudam::widen(code, start, i);
          if (std::isnan(w))
            ASSERT_TRUE(std::isnan(got)) << "row " << r << " element " << i;
          else
            ASSERT_EQ(bits(got), bits(w)) << (raw == &random ? "random" : "quantised") << " row " << r << " element "
                                          << i << ": " << got << " vs " << w;
        }
      }
    }
  }
}
