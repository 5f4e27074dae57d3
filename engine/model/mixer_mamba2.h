// The Mamba-2 mixer's weights as HF's Bamba stores them (modeling_bamba.py, BambaMixer): in_proj
// giving the gate z, x|B|C and dt, the depthwise conv over x|B|C, one dt bias, A = −exp(A_log) and D
// per head, the gated RMSNorm's weight and out_proj. Bound by mixer_mamba2.cpp; not the math
// (reference/ref_mamba2.h and the backends' Mamba-2 units).
#pragma once
#include <vector>

#include "engine/io/config.h"
#include "engine/model/mat.h"

namespace hl {

struct Mamba2Weights {
  Mat in_proj;                  // (Di + conv_dim + nh, H): rows z (Di), x|B|C (conv_dim = Di + 2GN), dt (nh)
  std::vector<float> in_bias;   // (Di + conv_dim + nh,) or empty
  std::vector<float> conv_w;    // (conv_dim, W): conv1d.weight[:, 0, :]
  std::vector<float> conv_b;    // (conv_dim,) or empty
  std::vector<float> dt_bias;   // (nh,)
  std::vector<float> A;         // (nh,) = −exp(A_log), fp32
  std::vector<float> D;         // (nh,)
  std::vector<float> norm_w;    // (Di,) the gated RMSNorm's weight
  Mat out_proj;                 // (H, Di)
  std::vector<float> out_bias;  // (H,) or empty
};

// Falcon-H1's µP factors of in_proj's output rows (HF compute_mup_vector): ssm_multipliers[0..4] over
// the segments z (Di) | x (Di) | B (G·N) | C (G·N) | dt (nh). Empty when all are 1 (every other family).
std::vector<float> mamba2_mup_vector(const JambaConfig& c);

}  // namespace hl
