// Portable kernels (the reference loops the vector kernels are checked against) and the runtime
// dispatch of cpu_simd.h: __builtin_cpu_supports picks AVX-512 (F, BW, VL, DQ), else AVX2+FMA+F16C,
// else these loops; $HL_ISA=portable|avx2|avx512 caps the choice (tests, benchmarks).
#include "engine/backend/cpu/cpu_simd.h"
#include "engine/core/rows16.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace hl::cpu::simd {
namespace {

inline float silu_ref(float v) {
  return v / (1.0f + std::exp(-v));
}

// The dot product of the reference: 8 interleaved accumulators, combined pairwise, then the tail.
struct Dot8 {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  float tail = 0;
  void add8(const float* a, const float* b) {
    for (int k = 0; k < 8; ++k) acc[k] += a[k] * b[k];
  }
  float sum() const { return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail; }
};

float dot_portable(const float* a, const float* b, int64_t n) {
  Dot8 d;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) d.add8(a + i, b + i);
  for (; i < n; ++i) d.tail += a[i] * b[i];
  return d.sum();
}

void widen_portable(DType t, const void* src, float* dst, int64_t n) {
  to_float(t, src, dst, static_cast<size_t>(n));
}

// Row by row: widen 256 weights at a time into a stack buffer and feed the same accumulators as
// dot_portable over the whole widened row, so the result equals the reference linear bit for bit.
// A block type is dequantised as ggml defines it (to_float), a piece of whole blocks at a time.
void matvec_portable(DType t, const void* W, int64_t rows, int64_t cols, const float* x, float* y) {
  constexpr int64_t kPiece = 256;  // a multiple of every block (32 or 256 weights)
  float buf[kPiece];
  const int64_t row_bytes = dtype_row_bytes(t, cols);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = static_cast<const uint8_t*>(W) + r * row_bytes;  // (cols,) stored dtype
    Dot8 d;
    for (int64_t c0 = 0; c0 < cols; c0 += kPiece) {
      const int64_t m = std::min(kPiece, cols - c0);
      to_float(t, row + dtype_row_bytes(t, c0), buf, static_cast<size_t>(m));
      int64_t i = 0;
      for (; i + 8 <= m; i += 8) d.add8(buf + i, x + c0 + i);
      for (; i < m; ++i) d.tail += buf[i] * x[c0 + i];
    }
    y[r] = d.sum();
  }
}

// The int8 path (Kernels::matvec_x8): the reference the vector kernels of cpu_simd_quant_impl.h are
// checked against. The integer sums are theirs exactly; the blocks' float terms are added in order.
float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_float(h);
}

void quantize_x_q8_0_portable(const float* x, int64_t n, float* d, int8_t* q) {
  for (int64_t k = 0; k < n / 32; ++k, x += 32, q += 32) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    d[k] = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    for (int j = 0; j < 32; ++j) q[j] = static_cast<int8_t>(std::nearbyint(x[j] * id));
  }
}

void quantize_x_q8_k_portable(const float* x, int64_t n, float* d, int8_t* q, int16_t* bsums) {
  for (int64_t k = 0; k < n / 256; ++k, x += 256, q += 256, bsums += 16) {
    float amax = 0, vmax = 0;
    for (int j = 0; j < 256; ++j)
      if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), vmax = x[j];
    if (amax == 0.0f) {
      d[k] = 0;
      std::fill(q, q + 256, int8_t{0});
      std::fill(bsums, bsums + 16, int16_t{0});
      continue;
    }
    const float iscale = -127.0f / vmax;
    for (int j = 0; j < 256; ++j) q[j] = static_cast<int8_t>(std::min(127.0f, std::nearbyint(iscale * x[j])));
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += q[16 * j + i];
      bsums[j] = static_cast<int16_t>(sum);
    }
    d[k] = 1.0f / iscale;
  }
}

struct XQ {  // a thread's quantised x, grown once
  std::vector<float> d;
  std::vector<int8_t> q;
  std::vector<int16_t> bsums;
};

// The 32 signed weight codes of one block of 32 (Q8_0: int8; Q4_0: nibble − 8; Q5_0: 5-bit code − 16,
// its fifth bits from qh as ggml's dequantize_row_q5_0 reads them) and the block's size in bytes.
int64_t block32_codes(DType t, const uint8_t* w, int c[32]) {
  if (t == DType::Q8_0) {
    for (int j = 0; j < 32; ++j) c[j] = static_cast<int8_t>(w[2 + j]);
    return 34;
  }
  const bool five = t == DType::Q5_0;
  const uint8_t* qs = w + (five ? 6 : 2);
  uint32_t qh = 0;
  if (five) std::memcpy(&qh, w + 2, 4);
  for (int j = 0; j < 16; ++j) {
    c[j] = (qs[j] & 15) | static_cast<int>(((qh >> j) & 1u) << 4);
    c[j + 16] = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
  }
  for (int j = 0; j < 32; ++j) c[j] -= five ? 16 : 8;
  return five ? 22 : 18;
}

void matvec_x8_portable(DType t, const void* W, int64_t rows, int64_t cols, const float* x, float* y) {
  if (!has_x8_path(t)) return matvec_portable(t, W, rows, cols, x, y);
  thread_local XQ b;
  const size_t n = static_cast<size_t>(cols);
  if (b.q.size() < n) b.q.resize(n), b.d.resize(n / 32), b.bsums.resize(n / 16);
  const int8_t* q = b.q.data();
  const int64_t row_bytes = dtype_row_bytes(t, cols);
  if (dtype_block(t) == 32) {  // Q8_0, Q4_0, Q5_0 against x in Q8_0 blocks: d_w · d_x · Σ w·q
    quantize_x_q8_0_portable(x, cols, b.d.data(), b.q.data());
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* w = static_cast<const uint8_t*>(W) + r * row_bytes;
      float acc = 0;
      for (int64_t k = 0; k < cols / 32; ++k) {
        int c[32];
        const int64_t bytes = block32_codes(t, w, c);
        int32_t s = 0;
        for (int j = 0; j < 32; ++j) s += c[j] * q[32 * k + j];
        acc += f16_at(w) * b.d[static_cast<size_t>(k)] * static_cast<float>(s);
        w += bytes;
      }
      y[r] = acc;
    }
    return;
  }
  quantize_x_q8_k_portable(x, cols, b.d.data(), b.q.data(), b.bsums.data());
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* w = static_cast<const uint8_t*>(W) + r * row_bytes;
    float acc = 0, mins = 0;
    for (int64_t k = 0; k < cols / 256; ++k) {
      const int8_t* qk = q + 256 * k;
      const int16_t* bs = b.bsums.data() + 16 * k;
      const float dx = b.d[static_cast<size_t>(k)];
      int32_t sumi = 0;
      if (t == DType::Q4_K || t == DType::Q5_K) {
        // ggml's get_scale_min_k4, then the nibbles of 64 values per 32 bytes; Q5_K adds bit g of
        // qh[l] as the fifth bit of value l of group g.
        const bool five = t == DType::Q5_K;
        const uint8_t* s = w + 4;
        uint8_t sc[8], mn[8];
        for (int j = 0; j < 8; ++j) {
          sc[j] = j < 4 ? s[j] & 63 : static_cast<uint8_t>((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
          mn[j] = j < 4 ? s[j + 4] & 63 : static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
        }
        int32_t summs = 0;
        for (int g = 0; g < 8; ++g) {
          const uint8_t* qs = w + (five ? 48 : 16) + 32 * (g / 2);
          int32_t sg = 0;
          for (int l = 0; l < 32; ++l) {
            const int code = (g % 2 ? qs[l] >> 4 : qs[l] & 15) | (five ? ((w[16 + l] >> g) & 1) << 4 : 0);
            sg += code * qk[32 * g + l];
          }
          sumi += sc[g] * sg;
          summs += mn[g] * (bs[2 * g] + bs[2 * g + 1]);
        }
        acc += dx * f16_at(w) * static_cast<float>(sumi);
        mins += dx * f16_at(w + 2) * static_cast<float>(summs);
        w += five ? 176 : 144;
      } else {  // Q6_K: value e = 128n + 32g + l, code c = low nibble | 2 high bits << 4, weight c − 32
        const int8_t* sc = reinterpret_cast<const int8_t*>(w + 192);
        for (int e = 0; e < 256; e += 16) {
          int32_t s16 = 0;
          for (int i = e; i < e + 16; ++i) {
            const int n = i / 128, g = (i % 128) / 32, l = i % 32;
            const int lo = (w[64 * n + 32 * (g & 1) + l] >> (g < 2 ? 0 : 4)) & 15;
            const int hi = (w[128 + 32 * n + l] >> (2 * g)) & 3;
            s16 += (lo | hi << 4) * qk[i];
          }
          sumi += sc[e / 16] * (s16 - 32 * bs[e / 16]);
        }
        acc += dx * f16_at(w + 208) * static_cast<float>(sumi);
        w += 210;
      }
    }
    y[r] = acc - mins;
  }
}

void axpy_portable(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void dot_rows_portable(const float* q, const float* K, int64_t ldk, int64_t m, int64_t n, float scale, float* z) {
  for (int64_t j = 0; j < m; ++j) z[j] = dot_portable(q, K + j * ldk, n) * scale;
}

void axpy_rows_portable(const float* p, const float* V, int64_t ldv, int64_t m, int64_t n, float* o) {
  for (int64_t j = 0; j < m; ++j)
    for (int64_t c = 0; c < n; ++c) o[c] += p[j] * V[j * ldv + c];
}

void silu_mul_portable(float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) g[i] = silu_ref(g[i]) * u[i];
}

void silu_portable(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = silu_ref(x[i]);
}

void softplus_portable(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] <= 20.0f ? std::log1p(std::exp(x[i])) : x[i];
}

void exp_portable(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::exp(x[i]);
}

const Kernels kPortable = {Isa::Portable,     "portable",    matvec_portable,   widen_portable,
                           dot_portable,      axpy_portable, dot_rows_portable, axpy_rows_portable,
                           silu_mul_portable, silu_portable, softplus_portable, scan_portable,
                           exp_portable,      matvec_x8_portable, quantize_x_q8_0_portable,
                           quantize_x_q8_k_portable};

Isa cpu_isa() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq"))
    return Isa::Avx512;
  // F16C from CPUID leaf 1, ECX bit 29 (clang's __builtin_cpu_supports has no name for it).
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29));
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c) return Isa::Avx2;
#endif
  return Isa::Portable;
}

// AMD family 19h (Zen 3, Zen 4) runs 512-bit operations as two 256-bit halves, and there the
// 16-lane widening of BF16/F16 weights (a cross-lane zero-extend) makes the AVX-512 matrix–vector
// product slower than the AVX2 one: 11 % fewer decode tokens/s measured on a Zen 4 EPYC. A fixed
// rule, not a timing, so that a machine always gets the same sums (bit-for-bit reproducible runs).
bool prefers_256_bit_matvec() {
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return false;
  const bool amd = ebx == 0x68747541 && edx == 0x69746e65 && ecx == 0x444d4163;  // "AuthenticAMD"
  if (!amd || !__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  unsigned family = (eax >> 8) & 0xf;
  if (family == 0xf) family += (eax >> 20) & 0xff;
  return family == 0x19;
#else
  return false;
#endif
}

const Kernels& choose() {
  Isa cap = Isa::Avx512;
  bool named = false;
  if (const char* env = std::getenv("HL_ISA")) {
    const std::string s = env;
    named = s == "portable" || s == "avx2" || s == "avx512";
    if (s == "portable") cap = Isa::Portable;
    if (s == "avx2") cap = Isa::Avx2;
  }
  const Kernels* k512 = kernels_for(Isa::Avx512);
  const Kernels* k256 = kernels_for(Isa::Avx2);
  if (!named && k512 && k256 && prefers_256_bit_matvec()) {
    static Kernels mixed = [&] {
      Kernels m = *k512;
      m.matvec = k256->matvec;
      m.name = "avx512 (avx2 matvec)";
      return m;
    }();
    return mixed;
  }
  for (int i = static_cast<int>(cap); i > 0; --i)
    if (const Kernels* k = kernels_for(static_cast<Isa>(i))) return *k;
  return kPortable;
}

}  // namespace

// The reference scan loop (jamba-spec.md §3.5): one channel at a time, tokens in order, state
// lanes n in order. Vector kernels run blocks of channels in lanes and hand the rest to this.
void scan_portable(const ScanArgs& a, int64_t d0, int64_t d1) {
  const int64_t N = a.N, Di = a.Di;
  for (int64_t d = d0; d < d1; ++d) {
    for (int64_t s = 0; s < a.S; ++s) {
      const float delta = a.dt[s * Di + d], ud = a.u[s * Di + d];
      const float* B = a.B + s * N;
      const float* C = a.C + s * N;
      float acc = 0, keep = 0;
      for (int64_t n = 0; n < N; ++n) {
        float& hs = a.h[tile_index(d, n, N)];
        const float dA = std::exp(delta * a.A[tile_index(d, n, N)]);
        hs = dA * hs + delta * B[n] * ud;
        acc += hs * C[n];
        keep += dA;
      }
      const float yv = acc + a.D[d] * ud;
      a.out[s * Di + d] = yv * silu_ref(a.z[s * a.z_stride + d]);
      if (a.retained) a.retained[s * Di + d] = keep / static_cast<float>(N);
    }
  }
}

bool has_x8_path(DType t) {
  return t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q5_0 || t == DType::Q4_K || t == DType::Q5_K ||
         t == DType::Q6_K;
}

const Kernels& portable() {
  return kPortable;
}

const Kernels* kernels_for(Isa isa) {
  static const Isa have = cpu_isa();
  if (static_cast<int>(isa) > static_cast<int>(have)) return nullptr;
  switch (isa) {
    case Isa::Portable:
      return &kPortable;
    case Isa::Avx2:
      return detail::avx2_kernels();
    case Isa::Avx512:
      return detail::avx512_kernels();
  }
  return nullptr;
}

const Kernels& kernels() {
  static const Kernels& k = choose();
  return k;
}

}  // namespace hl::cpu::simd

namespace hl {
// Declared in core/rows16.h: the layout follows the kernels in use.
bool rows16_preferred(DType t) {
  if (!rows16_format(t)) return false;
  const char* env = std::getenv("HL_ROWS16");
  if (env && env[0] == '0' && env[1] == '\0') return false;
  return cpu::simd::kernels().matvec_rows16 != nullptr;
}
}  // namespace hl
