// One test body for the kernels of every backend (as ggml's tests/test-backend-ops.cpp): RMSNorm,
// attention rows with their instruments under the three normalizers, the causal conv, the
// selective-scan step (with softplus) and the router, each checked against the reference functions
// (engine/reference). A backend enters as a KernelImpl; test_backend_kernels.cpp instantiates the CPU
// kernels (the dispatched ISA and the portable loops) and the CUDA backend's host math (cuda_math.h),
// test_vulkan_kernels.cpp the GLSL kernels through the Vulkan test hook (vk_kernel_run.h).
//
// Tolerances against the reference (which sums in fp64 and rounds once), |Δ| ≤ rel·|ref| + abs:
//   RMSNorm 1e-6, 1e-6 (one fp32 sum of ≤ 512 squares, one rsqrt);
//   attention o, p, instruments 1e-5, 1e-6 (fp32 dot of hd ≤ 64 terms, exp, an fp32 or fp64 sum of
//     ≤ 300 terms; ln D − Σ p(z − m) for the entropy loses ~1e-7·ln D);
//   conv 1e-6, 1e-6; scan over 40 tokens 1e-5, 1e-6 (the state carries each step's rounding on);
//   router probabilities and lse 1e-6, 1e-6, the top-k exactly (ties: the lower index first).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/io/config.h"
#include "engine/reference/ref_attention.h"
#include "engine/reference/ref_ffn.h"
#include "engine/reference/ref_mamba.h"
#include "engine/reference/ref_ops.h"

namespace hl::kerneltest {

// The kernels of one backend in the shapes of the reference functions. A kernel the backend does not
// expose on its own returns false (the case is skipped for it, naming why).
class KernelImpl {
 public:
  virtual ~KernelImpl() = default;
  // y (S, n) = RMSNorm of the rows of x (S, n) with weight w (n,).
  virtual bool rmsnorm(const float* x, const float* w, int64_t S, int64_t n, double eps, float* y) = 0;
  // One query per head over n keys: q (nh*hd,), K, V (n, nkv*hd) → o (nh*hd,), rows (nh,), p (nh, n).
  virtual bool attention(const float* q, const float* K, const float* V, int64_t n, int64_t nh, int64_t nkv, int64_t hd,
                         Normalizer norm, const float* null_logits, float* o, ref::AttnRow* rows, float* p) = 0;
  // S steps of the causal conv: window (W, Di) oldest row first, updated; x (S, Di) raw inputs u0;
  // conv_w (Di, W), bias (Di,) → u (S, Di).
  virtual bool conv(float* window, const float* x, int64_t S, const float* conv_w, const float* bias, int64_t Di,
                    int64_t W, float* u) = 0;
  // S scan steps from state h (Di, N), updated: dt (S, Di) before softplus, u, z (S, Di), B, C (S, N)
  // normalised, A (Di, N), D (Di,) → out (S, Di), delta (S, Di) after softplus, retained (S, Di).
  virtual bool scan(float* h, const float* dt, const float* u, const float* z, const float* B, const float* C,
                    const float* A, const float* D, int64_t S, int64_t Di, int64_t N, float* out, float* delta,
                    float* retained) = 0;
  // Router of S tokens: logits (S, E) → probs (S, E), topk (S, k), lse (S,).
  virtual bool router(const float* logits, int64_t S, int64_t E, int64_t k, float* probs, int32_t* topk,
                      float* lse) = 0;
};

// A backend's kernels by name; `make` returns null where that backend is unavailable here (the cases skip).
struct KernelBackend {
  std::string name;
  std::function<std::unique_ptr<KernelImpl>()> make;
};
inline void PrintTo(const KernelBackend& b, std::ostream* os) {
  *os << b.name;
}
inline std::string kernel_backend_name(const ::testing::TestParamInfo<KernelBackend>& info) {
  std::string n = info.param.name;
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

inline std::vector<float> randoms(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Every a[i] within rel·|b[i]| + abs of b[i]; the first difference named.
inline void expect_close(const float* a, const float* b, size_t n, double rel, double abs, const std::string& what) {
  for (size_t i = 0; i < n; ++i)
    ASSERT_NEAR(a[i], b[i], rel * std::fabs(b[i]) + abs) << what << " differs first at index " << i;
}

class BackendKernels : public ::testing::TestWithParam<KernelBackend> {
 protected:
  void SetUp() override {
    impl_ = GetParam().make();
    if (!impl_) GTEST_SKIP() << GetParam().name << ": not available here";
  }
  std::unique_ptr<KernelImpl> impl_;
};

TEST_P(BackendKernels, RmsNorm_MatchesTheReference) {
  for (int64_t n : {1, 4, 33, 128, 512}) {
    const int64_t S = 3;
    const std::vector<float> x = randoms(static_cast<size_t>(S * n), -5, 5, static_cast<uint32_t>(n));
    const std::vector<float> w = randoms(static_cast<size_t>(n), 0.5f, 1.5f, static_cast<uint32_t>(n + 1));
    std::vector<float> want(x.size()), got(x.size());
    for (int64_t s = 0; s < S; ++s) ref::rmsnorm(&x[s * n], w.data(), n, 1e-6, &want[s * n]);
    if (!impl_->rmsnorm(x.data(), w.data(), S, n, 1e-6, got.data())) GTEST_SKIP() << "no separate RMSNorm kernel";
    expect_close(got.data(), want.data(), got.size(), 1e-6, 1e-6, "rmsnorm n " + std::to_string(n));
  }
}

// Rows of 1, 2, 7 and 300 keys (one with a dominant key: entropy near 0), GQA 4 query heads on 2 kv
// heads, each normalizer; the sink logits differ per head.
TEST_P(BackendKernels, AttentionRowsAndInstruments_EachNormalizer_MatchTheReference) {
  const int64_t nh = 4, nkv = 2, hd = 16;
  const std::vector<float> sinks = {1.25f, -0.5f, 0.0f, 3.0f};
  for (Normalizer norm : {Normalizer::Softmax, Normalizer::Softmax1, Normalizer::Sink}) {
    for (int64_t n : {1, 2, 7, 300}) {
      const std::string what = std::string(normalizer_name(norm)) + ", " + std::to_string(n) + " keys";
      const uint32_t seed = static_cast<uint32_t>(n * 3 + static_cast<int>(norm));
      const std::vector<float> q = randoms(static_cast<size_t>(nh * hd), -1.5f, 1.5f, seed);
      std::vector<float> K = randoms(static_cast<size_t>(n * nkv * hd), -1.5f, 1.5f, seed + 100);
      const std::vector<float> V = randoms(static_cast<size_t>(n * nkv * hd), -2, 2, seed + 200);
      if (n == 7)
        for (int64_t i = 0; i < hd; ++i) K[3 * nkv * hd + i] = 8.0f * q[i];  // head 0 puts ~all mass on key 3
      std::vector<float> o_want(static_cast<size_t>(nh * hd)), o_got(o_want.size());
      std::vector<float> p_want(static_cast<size_t>(nh * n)), p_got(p_want.size());
      std::vector<ref::AttnRow> r_want(static_cast<size_t>(nh)), r_got(r_want.size());
      ref::attention_heads(q.data(), K.data(), V.data(), n, nh, nkv, hd, norm, sinks.data(), o_want.data(),
                           r_want.data(), p_want.data());
      if (!impl_->attention(q.data(), K.data(), V.data(), n, nh, nkv, hd, norm, sinks.data(), o_got.data(),
                            r_got.data(), p_got.data()))
        GTEST_SKIP() << "no separate attention kernel";
      expect_close(o_got.data(), o_want.data(), o_got.size(), 1e-5, 1e-6, what + ": o");
      expect_close(p_got.data(), p_want.data(), p_got.size(), 1e-5, 1e-6, what + ": p");
      for (int64_t h = 0; h < nh; ++h) {
        const std::string at = what + ", head " + std::to_string(h);
        EXPECT_NEAR(r_got[h].entropy, r_want[h].entropy, 1e-5 * r_want[h].entropy + 1e-6) << at << ": entropy";
        EXPECT_NEAR(r_got[h].entropy_norm, r_want[h].entropy_norm, 1e-5) << at << ": entropy_norm";
        EXPECT_NEAR(r_got[h].mass, r_want[h].mass, 1e-6) << at << ": mass";
        EXPECT_NEAR(r_got[h].p_null, r_want[h].p_null, 1e-6) << at << ": p_null";
        EXPECT_NEAR(r_got[h].max_abs_logit, r_want[h].max_abs_logit, 1e-5 * r_want[h].max_abs_logit + 1e-6) << at;
        if (norm == Normalizer::Softmax) EXPECT_EQ(r_got[h].p_null, 0.0f) << at;
      }
      if (n == 7) EXPECT_LT(r_want[0].entropy, 1e-3) << "the dominant key";
    }
  }
}

// 5 tokens through a window of W = 4 that starts with cached inputs, with and without a bias.
TEST_P(BackendKernels, CausalConv_WithCachedWindow_MatchesTheReference) {
  const int64_t Di = 70, W = 4, S = 5;
  for (bool with_bias : {true, false}) {
    std::vector<float> win = randoms(static_cast<size_t>(W * Di), -1, 1, 31);
    const std::vector<float> x = randoms(static_cast<size_t>(S * Di), -2, 2, 32);
    const std::vector<float> cw = randoms(static_cast<size_t>(Di * W), -0.5f, 0.5f, 33);
    const std::vector<float> cb = randoms(static_cast<size_t>(Di), -0.2f, 0.2f, 34);
    const float* bias = with_bias ? cb.data() : nullptr;
    std::vector<float> w_want = win, u_want(static_cast<size_t>(S * Di)), u_got(u_want.size());
    for (int64_t s = 0; s < S; ++s) {  // shift the window, append x_s, convolve
      std::copy(w_want.begin() + Di, w_want.end(), w_want.begin());
      std::copy(&x[s * Di], &x[(s + 1) * Di], w_want.end() - Di);
      ref::causal_conv_step(w_want.data(), cw.data(), bias, Di, W, &u_want[s * Di]);
    }
    if (!impl_->conv(win.data(), x.data(), S, cw.data(), bias, Di, W, u_got.data()))
      GTEST_SKIP() << "no separate conv kernel (the oracle test checks ssm_conv in the model)";
    expect_close(u_got.data(), u_want.data(), u_got.size(), 1e-6, 1e-6, with_bias ? "u, bias" : "u, no bias");
    expect_close(win.data(), w_want.data(), win.size(), 0, 0, "the window after the steps");
  }
}

// 40 steps of 20 channels (not a multiple of the vector width) with N = 8 from a non-zero state;
// dt spans softplus's threshold (20).
TEST_P(BackendKernels, ScanSteps_WithSoftplus_MatchTheReference) {
  const int64_t S = 40, Di = 20, N = 8;
  std::vector<float> dt = randoms(static_cast<size_t>(S * Di), -6, 2, 41);
  dt[5] = 20.5f;
  dt[6] = 19.5f;
  const std::vector<float> u = randoms(static_cast<size_t>(S * Di), -2, 2, 42);
  const std::vector<float> z = randoms(static_cast<size_t>(S * Di), -3, 3, 43);
  const std::vector<float> B = randoms(static_cast<size_t>(S * N), -1, 1, 44);
  const std::vector<float> C = randoms(static_cast<size_t>(S * N), -1, 1, 45);
  const std::vector<float> A = randoms(static_cast<size_t>(Di * N), -4, -0.1f, 46);
  const std::vector<float> D = randoms(static_cast<size_t>(Di), -1, 1, 47);
  const std::vector<float> h0 = randoms(static_cast<size_t>(Di * N), -1, 1, 48);
  std::vector<float> h_want = h0, out_want(static_cast<size_t>(S * Di)), d_want(out_want.size()),
                     r_want(out_want.size());
  for (int64_t s = 0; s < S; ++s) {
    for (int64_t d = 0; d < Di; ++d) d_want[s * Di + d] = ref::softplus(dt[s * Di + d]);
    ref::scan_step(h_want.data(), &d_want[s * Di], A.data(), &B[s * N], &C[s * N], D.data(), &u[s * Di], &z[s * Di], Di,
                   N, &out_want[s * Di], &r_want[s * Di]);
  }
  std::vector<float> h = h0, out(out_want.size()), delta(out_want.size()), ret(out_want.size());
  if (!impl_->scan(h.data(), dt.data(), u.data(), z.data(), B.data(), C.data(), A.data(), D.data(), S, Di, N,
                   out.data(), delta.data(), ret.data()))
    GTEST_SKIP() << "no separate scan kernel";
  expect_close(delta.data(), d_want.data(), delta.size(), 1e-6, 1e-6, "delta");
  expect_close(ret.data(), r_want.data(), ret.size(), 1e-5, 1e-6, "retained");
  expect_close(out.data(), out_want.data(), out.size(), 1e-5, 1e-6, "out");
  expect_close(h.data(), h_want.data(), h.size(), 1e-5, 1e-6, "state");
}

// E of 1, 4, 8, 16, every k up to 4, with an exact tie (logits 1 and 3 equal).
TEST_P(BackendKernels, Router_ProbsTopkLse_MatchTheReference_TiesToTheLowerIndex) {
  const int64_t S = 3;
  for (int64_t E : {1, 4, 8, 16}) {
    for (int64_t k = 1; k <= std::min<int64_t>(E, 4); ++k) {
      std::vector<float> logits = randoms(static_cast<size_t>(S * E), -3, 3, static_cast<uint32_t>(E * 10 + k));
      if (E >= 4)
        for (int64_t s = 0; s < S; ++s) logits[s * E + 1] = logits[s * E + 3] = 4.0f;  // a tie at the top
      std::vector<float> p_want(logits.size()), p_got(logits.size()), l_want(S), l_got(S);
      std::vector<int32_t> t_want(static_cast<size_t>(S * k)), t_got(t_want.size());
      for (int64_t s = 0; s < S; ++s) l_want[s] = ref::router(&logits[s * E], E, k, &p_want[s * E], &t_want[s * k]);
      if (!impl_->router(logits.data(), S, E, k, p_got.data(), t_got.data(), l_got.data()))
        GTEST_SKIP() << "no separate router kernel";
      const std::string what = "E " + std::to_string(E) + ", k " + std::to_string(k);
      expect_close(p_got.data(), p_want.data(), p_got.size(), 1e-6, 1e-6, what + ": probs");
      expect_close(l_got.data(), l_want.data(), l_got.size(), 1e-6, 1e-6, what + ": lse");
      EXPECT_EQ(t_got, t_want) << what << ": top-k";
      if (E >= 4 && k >= 2) EXPECT_EQ(t_want[0], 1) << "the tie goes to the lower index";
    }
  }
}

}  // namespace hl::kerneltest
