// The model's weights bound to layers (jamba-spec.md §2.1). Matrices stay in their stored dtype
// (views into the checkpoint files' bytes, read into owned memory at load, or into owned buffers
// for merged adapters); small vectors (norms, biases, A, D, conv) are widened to float at load.
// Not the forward pass: see backend/.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/io/config.h"
#include "engine/io/file_stamp.h"
#include "engine/model/layer_schedule.h"
#include "engine/model/mat.h"
#include "engine/model/mixer_mamba2.h"

namespace hl {

class Checkpoint;
class MappedFile;
struct WeightQuantization;  // model/quantize.h

struct AttentionWeights {
  Mat q, k, v, o;             // (nh*hd, H), (nkv*hd, H), (nkv*hd, H), (H, nh*hd)
  std::vector<float> sinks;   // (nh,) learned sink logits; empty when absent
  std::vector<float> q_bias, k_bias, v_bias, o_bias;  // (nh*hd,), (nkv*hd,) ×2, (H,) or empty (attention_bias)
};

struct MambaWeights {
  Mat in_proj;                     // (2*Di, H): rows [0,Di) x branch, [Di,2Di) gate z
  std::vector<float> in_bias;      // (2*Di,) or empty
  std::vector<float> conv_w;       // (Di, W): conv1d.weight[:, 0, :]
  std::vector<float> conv_b;       // (Di,) or empty
  Mat x_proj;                      // (R + 2N, Di): rows dt, B, C
  std::vector<float> dt_norm;      // (R,)
  std::vector<float> b_norm;       // (N,)
  std::vector<float> c_norm;       // (N,)
  Mat dt_proj;                     // (Di, R)
  std::vector<float> dt_bias;      // (Di,)
  std::vector<float> A;            // (Di, N) = -exp(A_log), fp32
  std::vector<float> D;            // (Di,)
  Mat out_proj;                    // (H, Di)
  std::vector<float> out_bias;     // (H,) or empty
};

struct MlpWeights {
  Mat gate, up, down;                      // (I, H), (I, H), (H, I); gate empty without one (relu²)
  std::vector<float> gate_bias, up_bias, down_bias;  // (I,), (I,), (H,) or empty (mlp_bias: Nemotron-H, Falcon-H1)
};

struct MoeWeights {
  Mat router;                       // (E, H)
  std::vector<MlpWeights> experts;  // E entries (views into fused tensors when stored fused)
  MlpWeights shared;                // the shared expert (Granite's shared_mlp, Nemotron-H's shared_experts), or empty
  std::vector<float> router_bias;   // (E,) e_score_correction_bias of a sigmoid router (choice only), or empty
  Mat latent_in, latent_out;        // (Lat, H) fc1_latent_proj, (H, Lat) fc2_latent_proj, or empty (Nemotron-H)
  std::vector<float> latent_in_bias, latent_out_bias;  // (Lat,), (H,) or empty (mlp_bias)
};

// One layer's weights; which parts are bound is the layer's LayerSpec (Model::schedule). A mixer
// kind with weights of its own declares them in its header (model/mixer_<kind>.h, over mat.h),
// included above, and adds its member here; its bind() fills it (model/mixer_ops.h).
struct LayerWeights {
  std::vector<float> input_norm;   // (H,)
  std::vector<float> pre_ff_norm;  // (H,)
  AttentionWeights attn;           // when the layer has attention
  MambaWeights mamba;              // when it has a Mamba-1 SSM
  Mamba2Weights mamba2;            // when it has a Mamba-2 SSM
  MlpWeights mlp;                  // when its FFN is dense
  MoeWeights moe;                  // when its FFN is MoE
};

struct ModelWeights {
  Mat embed;                         // (V, H)
  Mat lm_head;                       // (V, H) (= embed when tied and absent)
  std::vector<float> final_norm;     // (H,)
  std::vector<float> register_rows;  // (R_trained, H) trained registers, or empty
  std::vector<float> mean_embedding; // (H,) mean row of embed (test-time registers)
  std::vector<LayerWeights> layers;  // L entries
};

// A loaded model: config, weights and whatever keeps the weights' memory alive.
struct Model {
  std::string dir;               // checkpoint folder
  std::string name;              // folder name
  std::string config_sha256;
  std::string tokenizer_path;    // empty if none
  JambaConfig config;
  LayerSchedule schedule;        // resolved from config at load: each layer's kinds, indices, sizes
  ModelWeights w;
  std::vector<std::shared_ptr<const void>> keep_alive;  // mappings and owned buffers
  std::string adapter;           // adapter folder merged in, or empty
  // Set when the matrices were quantised on load (--weights, model/quantize.h): the format, and per
  // matrix what was kept or quantised with its relative RMS error. Null for as-stored weights.
  std::shared_ptr<const WeightQuantization> quantization;
  // `--weights ...+fp32-activations`: every matrix's Mat::fp32_activations is set (keep_fp32_activations).
  bool fp32_activations = false;
  // The checkpoint files the weights were read from, as they were then (issue 18 item 3): every
  // forward() calls check_files(), so a file replaced or truncated since is a one-line Error
  // "FILE: changed on disk since it was loaded" instead of results from weights nobody can name.
  std::vector<FileStamp> files;
  void check_files() const { check_unchanged(files); }

  // Every matrix of the model with its tensor name (for the adapter merge and the DoRA view).
  std::vector<Mat*> matrices();
  // Every parameter once: matrices, widened vectors, trained registers; a tied head is the embedding.
  int64_t param_count() const;         // total parameters
  int64_t active_param_count() const;  // shared + k of E experts per MoE layer (the k largest if they differ)
  // Bytes of weights one decode step reads at their in-memory dtype (trace-format.md §4): every
  // shared matrix, the router and k experts per MoE layer, one embedding row, the whole LM head (also
  // when tied), plus the widened vectors (norms, biases, conv, A, D, sinks) at 4 bytes each.
  // Registers and the mean embedding are read once per run and not counted.
  int64_t weight_bytes_per_token() const;
};

}  // namespace hl
