// The Mamba-2 SSM as plain loops (Dao & Gu 2024, "Transformers are SSMs"; Hugging Face's Bamba /
// Mamba-2 `torch_forward` slow path): the per-token recurrence, the chunked (SSD) scan over a block of
// tokens, the gated RMSNorm, and the SSM's hidden attention matrix (Ali, Zimerman & Wolf 2024). The
// building blocks of the Mamba-2 mixer kind (its reference unit is in ref_mamba2.cpp).
// Not fast: the oracle. Sums in fp64, the state in fp32 as the other references keep theirs.
#pragma once
#include <cstdint>
#include <limits>
#include <vector>

namespace hl::ref {

// The sizes of one Mamba-2 layer's SSM. Heads h = 0..nh−1 of P channels each (Di = nh·P); B and C come
// in G groups of N, head h reading group h / (nh / G) (HF's repeat_interleave); Δ is clamped into
// [dt_min, dt_max] after the softplus (config `time_step_limit`, (0, ∞) by default).
struct Mamba2Dims {
  int64_t nh = 0, P = 0, N = 0, G = 1;
  double dt_min = 0, dt_max = std::numeric_limits<double>::infinity();
  int64_t inner() const { return nh * P; }  // Di
  int64_t group_of(int64_t h) const { return h / (nh / G); }
};

// One token's SSM inputs after the conv and its SiLU: x (Di,), B (G·N,), C (G·N,), and dt (nh,) as
// in_proj gives it (before the bias and the softplus).
struct Mamba2Token {
  const float* x = nullptr;
  const float* B = nullptr;
  const float* C = nullptr;
  const float* dt = nullptr;
};

// Δ (nh,) = clamp(softplus(dt + dt_bias), dt_min, dt_max).
void mamba2_delta(const Mamba2Dims& d, const float* dt, const float* dt_bias, float* delta);

// One step: per head h, S_h ← exp(Δ_h A_h) S_h + Δ_h x_h B_gᵀ (S (nh, P, N)), y_h = S_h C_g + D_h x_h.
// A (nh,) = −exp(A_log); D (nh,). y (Di,) before the gate; retained (nh,) = exp(Δ_h A_h) if non-null.
void mamba2_step(const Mamba2Dims& d, const Mamba2Token& in, const float* dt_bias, const float* A, const float* D,
                 float* S, float* y, float* retained);

// The same over T tokens (token t's inputs in[t]) by chunks of Q (SSD, Dao & Gu 2024 §6): within a
// chunk the quadratic form y_i = Σ_{j≤i} (C_i·B_j) e^{a_{j+1..i}} Δ_j x_j, between chunks the state
// carried at the boundaries. Starts from and leaves the state in S; y (T, Di). Equal to T calls of
// mamba2_step up to rounding.
void mamba2_scan_chunked(const Mamba2Dims& d, const std::vector<Mamba2Token>& in, int64_t Q, const float* dt_bias,
                         const float* A, const float* D, float* S, float* y);

// y (Di,) ← (y ⊙ silu(z)) normalised by the RMS over each group of `group` channels, times w (Di,)
// (HF's gated RMSNorm with norm_before_gate = False; group = Di for Bamba, Di / G for Mamba-2).
void gated_rmsnorm(float* y, const float* z, const float* w, int64_t Di, int64_t group, double eps);
// The other orders of Falcon-H1's FalconH1RMSNormGated: norm_before_gate (y normalised per group,
// times w, then ⊙ silu(z)), or no norm at all (w null: y ⊙ silu(z), its mamba_rms_norm false).
void gate_then_norm_or_not(float* y, const float* z, const float* w, int64_t Di, int64_t group, double eps,
                           bool norm_before_gate);

// The hidden attention of head h (Ali, Zimerman & Wolf 2024): the row t of the lower-triangular
// M_h (T, T) with y_t = Σ_{s≤t} M_h[t, s] x_s + D_h x_t for every channel of the head, where
// M_h[t, s] = (C_t · B_s) · exp(A_h Σ_{r=s+1..t} Δ_{r,h}) · Δ_{s,h}. Δ (T, nh) as mamba2_delta gives;
// B, C (T, G·N). row (t + 1,) gets s = 0..t. O(t·N).
void mamba2_hidden_attention_row(const Mamba2Dims& d, const float* delta, const float* B, const float* C,
                                 const float* A, int64_t h, int64_t t, double* row);

}  // namespace hl::ref
