// The chunked form of the Mamba-2 scan on the CPU (SSD: Dao & Gu 2024, "Transformers are SSMs", §6),
// the prefill path of cpu_mamba2.cpp. A block of S tokens goes in chunks of Q; per head h (group g),
// with a_r = Δ_r A_h and cum_i = Σ_{r≤i} a_r inside the chunk (≤ 0, non-increasing):
//   y_i = Σ_{j≤i} (C_i·B_j) e^{cum_i − cum_j} Δ_j x_j  +  e^{cum_i} (S_h C_i)  +  D_h x_i
//   S_h ← e^{cum_last} S_h + Σ_j e^{cum_last − cum_j} Δ_j x_j B_jᵀ
// as matrix products: C Bᵀ once per group and chunk, then per head (M ⊙ CBᵀ) X, (e^{cum} ⊙ C) S_hᵀ and
// Xᵀ (w ⊙ B). Every exponent is a difference cum_i − cum_j with j ≤ i, or cum itself: never positive.
// Equal to the token-order recurrence up to float rounding, the state after the block included. A
// chunk whose x holds a NaN or an infinity runs that head in token order (M X would carry 0 · ∞ into
// the rows before it), so a non-finite value never reaches an earlier token.
// Also the token-order recurrence both paths share (scan_in_order). Not the reference (ref_mamba2.h's
// plain loops).
#pragma once
#include <cstdint>
#include <vector>

namespace hl::cpu {

// How the CPU Mamba-2 mixer runs a block of S > 1 tokens. Auto: as ssd_pays says (the token-order
// scan always for S == 1, a decode step).
enum class Mamba2Scan { Auto, TokenOrder, Chunked };
// Process-wide, for tests and benchmarks (default Auto); read once per block.
void set_mamba2_scan(Mamba2Scan mode);
Mamba2Scan mamba2_scan();

// Auto's choice for a block of S tokens with heads of P channels and N state lanes: the chunked form
// from kSsdMinTokens tokens on when a head's state holds ≥ kSsdLargeState values, else from
// kSsdMinTokensSmall. Measured with tools/bench_ssd.cpp (2 threads, AVX-512): with P 64, N 128 the
// chunked form's SSM part is 1.2–1.4× the token-order scan's speed at 2 tokens, 2× at 4, 3× at 8 and
// 4–5× from 16; with P 32, N 16 (the tiny presets) it only breaks even from ~32 tokens.
constexpr int64_t kSsdMinTokens = 8, kSsdMinTokensSmall = 32, kSsdLargeState = 2048;
inline bool ssd_pays(int64_t S, int64_t P, int64_t N) {
  return S >= (P * N >= kSsdLargeState ? kSsdMinTokens : kSsdMinTokensSmall);
}

// One head's recurrence over rows [0, L) in token order: S_h ← e^{Δ a} S_h + Δ x Bᵀ, y = S_h C + D_h x.
// X (L, P), B and C (L, N) at row stride ld; dl Δ at stride dl_ld; Sh (P, N) in and out; Y (L, P) at
// stride ldy; retained e^{Δ a} at stride dl_ld, or null. cpu_mamba2.cpp's decode step and short blocks,
// and a chunk of ssd_scan whose x holds a NaN or an infinity.
void scan_in_order(int64_t L, int64_t P, int64_t N, int64_t ld, int64_t ldy, const float* X, const float* B,
                   const float* C, const float* dl, int64_t dl_ld, float a, float Dh, float* Sh, float* Y,
                   float* retained);

// The chunk length for a config's chunk_size: clamped into [kSsdMinChunk, kSsdMaxChunk]. Any length
// gives the same result up to rounding; the CPU's best is shorter than the configs' 128–256: the
// chunk's quadratic part (2·Q·P flops per token and head) grows with Q while the state's (4·P·N)
// does not, and short chunks already run the products at BLAS speed (bench_ssd, P 64, N 128, T 1024
// and 4096: Q 32, 64 and 128 alike within the machine's noise, Q 256 ~25% slower in the SSM part).
constexpr int64_t kSsdMinChunk = 8, kSsdMaxChunk = 64;
int64_t ssd_chunk(int64_t chunk_size);

// One layer's sizes: nh heads of P channels (Di = nh·P), state N, G groups of B and C (head h reads
// group h / (nh / G)); a row of xbc holds x (Di) | B (G·N) | C (G·N) at a stride of ld floats.
struct SsdDims {
  int64_t nh = 0, P = 0, N = 0, G = 1, ld = 0;
};

// Buffers of the chunked scan, grown to the largest block and reused (CpuRun::scratch).
struct SsdScratch {
  std::vector<float> cb;                   // (span chunks, G, Q, Q): C Bᵀ per chunk and group
  std::vector<std::vector<float>> thread;  // per pool thread: M (Q, Q) | e^cum·C, w·B (Q, N) each | e, Δ (Q) each
  std::vector<std::vector<double>> cum;    // per pool thread: (Q,)
};

// The block through the chunked form: xbc (S, ld), delta (S, nh) Δ after softplus and clamp, A and
// D (nh,); state (nh, P, N) in and out; out (S, nh·P) the SSM output before the gate; retained
// (S, nh) = exp(Δ A) per token and head, or null. Q: the chunk length (ssd_chunk). Heads over the pool.
void ssd_scan(const SsdDims& d, int64_t Q, int64_t S, const float* xbc, const float* delta, const float* A,
              const float* D, float* state, float* out, float* retained, SsdScratch& sc);

}  // namespace hl::cpu
