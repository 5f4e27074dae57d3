// The kernel cases of backend_kernel_cases.h on the host's backends: the CPU backend's kernels (the
// ISA it dispatches to, and the portable loops every vector kernel mirrors) and the CUDA backend's
// per-element math (cuda_math.h, the `__host__ __device__` functions its kernels are made of, run here
// on the host: no toolkit, no device). The Vulkan backend's GLSL kernels: test_vulkan_kernels.cpp.
// The CUDA math has no conv function (the conv is written inside its kernel): that case skips for it,
// and the oracle test checks ssm_conv in the model.
#include <cstring>

#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/cpu/cpu_simd.h"
#include "engine/backend/cuda/cuda_math.h"
#include "engine/probes/attention_probe.h"
#include "engine/probes/router_probe.h"
#include "tests/engine/backend_kernel_cases.h"

using namespace hl;
using namespace hl::kerneltest;

namespace {

// The CPU backend's kernels with the vector kernels `k` (cpu_simd.h).
class CpuKernels : public KernelImpl {
 public:
  explicit CpuKernels(const cpu::simd::Kernels& k) : k_(k) {}
  bool rmsnorm(const float* x, const float* w, int64_t S, int64_t n, double eps, float* y) override {
    cpu::rmsnorm(x, w, S, n, eps, y);
    return true;
  }
  // As cpu_mixers.cpp: dot_rows → the probe's normalizer and instruments → axpy_rows.
  bool attention(const float* q, const float* K, const float* V, int64_t n, int64_t nh, int64_t nkv, int64_t hd,
                 Normalizer norm, const float* null_logits, float* o, ref::AttnRow* rows, float* p) override {
    const int64_t kvw = nkv * hd, group = nh / nkv;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    std::vector<float> z(static_cast<size_t>(n));
    std::fill(o, o + nh * hd, 0.0f);
    for (int64_t h = 0; h < nh; ++h) {
      const int64_t g = h / group;
      k_.dot_rows(q + h * hd, K + g * hd, kvw, n, hd, scale, z.data());
      AttnRowStats st;
      attention_row(z.data(), n, norm, null_logits[h], p + h * n, &st);
      k_.axpy_rows(p + h * n, V + g * hd, kvw, n, hd, o + h * hd);
      rows[h] = ref::AttnRow{st.entropy, st.entropy_norm, st.mass, st.p_null, st.max_abs_logit};
    }
    return true;
  }
  // cpu_ops.h's conv on all channels, with conv_w transposed to (W, Di) as the backend keeps it.
  bool conv(float* window, const float* x, int64_t S, const float* conv_w, const float* bias, int64_t Di, int64_t W,
            float* u) override {
    std::vector<float> cwT(static_cast<size_t>(W * Di));  // (W, Di)
    for (int64_t d = 0; d < Di; ++d)
      for (int64_t j = 0; j < W; ++j) cwT[j * Di + d] = conv_w[d * W + j];
    cpu::causal_conv_silu(k_, x, Di, S, window, cwT.data(), bias, Di, W, 0, Di, u);
    return true;
  }
  // As cpu_mixers.cpp: softplus in place, then the scan on the tiled state.
  bool scan(float* h, const float* dt, const float* u, const float* z, const float* B, const float* C, const float* A,
            const float* D, int64_t S, int64_t Di, int64_t N, float* out, float* delta, float* retained) override {
    std::copy(dt, dt + S * Di, delta);
    k_.softplus(delta, S * Di);
    std::vector<float> At(static_cast<size_t>(cpu::simd::tiled_size(Di, N)), 0.0f), ht(At.size(), 0.0f);
    for (int64_t d = 0; d < Di; ++d)
      for (int64_t n = 0; n < N; ++n) {
        At[cpu::simd::tile_index(d, n, N)] = A[d * N + n];
        ht[cpu::simd::tile_index(d, n, N)] = h[d * N + n];
      }
    cpu::simd::ScanArgs a;
    a.S = S;
    a.Di = Di;
    a.N = N;
    a.dt = delta;
    a.u = u;
    a.z = z;
    a.z_stride = Di;
    a.B = B;
    a.C = C;
    a.A = At.data();
    a.D = D;
    a.h = ht.data();
    a.out = out;
    a.retained = retained;
    k_.scan(a, 0, Di);
    for (int64_t d = 0; d < Di; ++d)
      for (int64_t n = 0; n < N; ++n) h[d * N + n] = ht[cpu::simd::tile_index(d, n, N)];
    return true;
  }
  bool router(const float* logits, int64_t S, int64_t E, int64_t k, float* probs, int32_t* topk, float* lse) override {
    for (int64_t s = 0; s < S; ++s) lse[s] = route(logits + s * E, E, k, probs + s * E, topk + s * k);
    return true;
  }

 private:
  const cpu::simd::Kernels& k_;
};

// The CUDA kernels' per-element math in the kernels' order (cuda_kernels.cu), on the host.
class CudaMathKernels : public KernelImpl {
 public:
  bool rmsnorm(const float* x, const float* w, int64_t S, int64_t n, double eps, float* y) override {
    for (int64_t s = 0; s < S; ++s) {
      double ss = 0;
      for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[s * n + i]) * x[s * n + i];
      const float inv = cudam::rms_inv(ss, n, eps);
      for (int64_t i = 0; i < n; ++i) y[s * n + i] = cudam::rms_scale(w[i], x[s * n + i], inv);
    }
    return true;
  }
  bool attention(const float* q, const float* K, const float* V, int64_t n, int64_t nh, int64_t nkv, int64_t hd,
                 Normalizer norm, const float* null_logits, float* o, ref::AttnRow* rows, float* p) override {
    const int64_t kvw = nkv * hd, group = nh / nkv;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    const int nm = static_cast<int>(norm);
    std::vector<float> z(static_cast<size_t>(n));
    for (int64_t h = 0; h < nh; ++h) {
      const int64_t g = h / group;
      const float zn = cudam::attn_null_logit(nm, null_logits[h]);
      float m = -INFINITY, mabs = 0;
      for (int64_t j = 0; j < n; ++j) {
        float acc = 0;
        for (int64_t i = 0; i < hd; ++i) acc += q[h * hd + i] * K[j * kvw + g * hd + i];
        z[j] = acc * scale;
        m = std::fmax(m, z[j]);
        mabs = std::fmax(mabs, std::fabs(z[j]));
      }
      if (cudam::attn_has_null(nm)) m = std::fmax(m, zn);
      double den = 0;
      for (int64_t j = 0; j < n; ++j) den += std::exp(z[j] - m);
      const double e_null = cudam::attn_has_null(nm) ? std::exp(static_cast<double>(zn) - m) : 0.0;
      den += e_null;
      double mass = 0, weighted = 0;
      for (int64_t j = 0; j < n; ++j) {
        p[h * n + j] = static_cast<float>(std::exp(z[j] - m) * (1.0 / den));
        mass += p[h * n + j];
        weighted += static_cast<double>(p[h * n + j]) * (static_cast<double>(z[j]) - m);
      }
      for (int64_t i = 0; i < hd; ++i) {
        float acc = 0;
        for (int64_t j = 0; j < n; ++j) acc += p[h * n + j] * V[j * kvw + g * hd + i];
        o[h * hd + i] = acc;
      }
      const cudam::AttnStats st = cudam::attn_finish(nm, den, e_null, zn, m, mass, weighted, mabs, n);
      rows[h] = ref::AttnRow{st.entropy, st.entropy_norm, st.mass, st.p_null, st.max_abs_logit};
    }
    return true;
  }
  bool conv(float*, const float*, int64_t, const float*, const float*, int64_t, int64_t, float*) override {
    return false;
  }
  bool scan(float* h, const float* dt, const float* u, const float* z, const float* B, const float* C, const float* A,
            const float* D, int64_t S, int64_t Di, int64_t N, float* out, float* delta, float* retained) override {
    for (int64_t s = 0; s < S; ++s)
      for (int64_t d = 0; d < Di; ++d) {
        const float dl = cudam::softplus(dt[s * Di + d]);
        float acc = 0, keep = 0;
        for (int64_t n = 0; n < N; ++n) {
          keep += cudam::scan_update(h[d * N + n], dl, A[d * N + n], B[s * N + n], u[s * Di + d]);
          acc += h[d * N + n] * C[s * N + n];
        }
        out[s * Di + d] = cudam::scan_output(acc, D[d], u[s * Di + d], z[s * Di + d]);
        delta[s * Di + d] = dl;
        retained[s * Di + d] = keep / static_cast<float>(N);
      }
    return true;
  }
  bool router(const float* logits, int64_t S, int64_t E, int64_t k, float* probs, int32_t* topk, float* lse) override {
    for (int64_t s = 0; s < S; ++s)
      lse[s] = cudam::route(logits + s * E, static_cast<int>(E), static_cast<int>(k), probs + s * E, topk + s * k);
    return true;
  }
};

std::vector<KernelBackend> host_backends() {
  std::vector<KernelBackend> b;
  b.push_back({"cpu", [] { return std::make_unique<CpuKernels>(cpu::simd::kernels()); }});
  b.push_back({"cpu_portable", [] { return std::make_unique<CpuKernels>(cpu::simd::portable()); }});
  b.push_back({"cuda_math", [] { return std::make_unique<CudaMathKernels>(); }});
  return b;
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Host, BackendKernels, ::testing::ValuesIn(host_backends()), kernel_backend_name);
