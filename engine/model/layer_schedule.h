// The layer schedule: per decoder layer, its mixer and feed-forward kinds, its index among the layers
// of its kind (the A_n / M_n / X_n axes of a record, trace-format.md §2) and the parameters its
// kernels need. Resolved once (from Jamba's period/offset fields, jamba-spec.md §1, or from explicit
// per-layer lists) and read by every consumer: backends, records, sessions, trace import, views.
// Not the weights (model/weights.h). Shape after llama.cpp's per-layer hparams (`is_recurrent(il)`).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/io/config.h"

namespace hl {

// What mixes the tokens in a layer: the kinds of mixer_kinds.def (a new kind, such as a Mamba-2 SSM
// or a layer running attention and an SSM in parallel, is one line there). LayerSpec numbers a
// layer's attention part and its SSM part separately, so one layer can hold both.
enum class MixerKind : uint8_t {
#define HL_MIXER_KIND(e, name, letter, attn, ssm) e,
#include "engine/model/mixer_kinds.def"
#undef HL_MIXER_KIND
};
inline constexpr int kMixerKinds = 0
#define HL_MIXER_KIND(e, name, letter, attn, ssm) +1
#include "engine/model/mixer_kinds.def"
#undef HL_MIXER_KIND
    ;
// What follows the mixer: one dense MLP, a mixture of experts, or nothing.
enum class FfnKind : uint8_t { Dense, MoE, None };

const char* mixer_name(MixerKind k);  // "attention", "mamba" (info --json, the session manifest words)
const char* ffn_name(FfnKind k);      // "dense", "moe", "none"
char mixer_letter(MixerKind k);       // 'A', 'M' (the ribbon strip)
bool mixer_has_attention(MixerKind k);  // the layer is numbered on the A_n axis
bool mixer_has_ssm(MixerKind k);        // ... on the M_n axis
inline bool mixer_present(MixerKind k) { return k != MixerKind::None; }  // a layer with no mixer skips it and its norm
char ffn_letter(FfnKind k);           // 'D', 'E', '-'
bool parse_mixer_kind(const std::string& s, MixerKind* out);  // inverse of mixer_name
bool parse_ffn_kind(const std::string& s, FfnKind* out);      // inverse of ffn_name

struct AttentionParams {
  int64_t heads = 0, kv_heads = 0, head_dim = 0;  // nh, nkv, hd
  int64_t rotary_dim = 0;                         // RoPE on q/k dims [0, rotary_dim); 0: no positional encoding
  double rope_theta = 0;
  bool operator==(const AttentionParams&) const = default;
};
struct SsmParams {
  int64_t d_inner = 0, d_state = 0, d_conv = 0, dt_rank = 0;  // Di, N, W, R (R: Mamba-1)
  int64_t heads = 0, groups = 0;                              // Mamba-2: nh heads of Di / nh channels, G B/C groups
  bool operator==(const SsmParams&) const = default;
};
struct FfnParams {
  int64_t d_ff = 0;                  // I: the dense MLP's and each expert's width
  int64_t experts = 0, top_k = 0;    // E, k (MoE layers; 0 elsewhere)
  bool gated = true;                 // SwiGLU (gate, up, down); false: down(relu(up x)²) (Nemotron-H)
  int64_t shared_d_ff = 0;           // MoE layers: a shared expert's width beside the routed (Granite); 0 none
  bool renormalize = false;          // MoE layers: the k chosen probabilities renormalised to sum 1 (Granite)
  // Dense SwiGLU: down(up x ⊙ silu(gate_multiplier · gate x)) · down_multiplier (Falcon-H1's µP; 1 elsewhere).
  double gate_multiplier = 1.0, down_multiplier = 1.0;
  // MoE layers with DeepSeek-V3's router (Nemotron-H): sigmoid scores, top-k within the topk_groups
  // best of `groups` expert groups (chosen on score + correction bias), weights × routed_scaling;
  // the experts between latent projections of `latent` dims (0: none). expert_d_ff: the routed
  // experts' width where it differs from the dense MLPs' d_ff (0: d_ff); an MoE layer's d_ff is it.
  bool sigmoid_router = false;
  int64_t groups = 1, topk_groups = 1;
  double routed_scaling = 1.0;
  int64_t latent = 0;
  int64_t expert_d_ff = 0;
  bool operator==(const FfnParams&) const = default;
};
// The parameters shared by the layers of a schedule (every family so far has one set).
struct LayerParams {
  AttentionParams attn;
  SsmParams ssm;
  FfnParams ffn;
  bool operator==(const LayerParams&) const = default;
};

// One layer. The indices are −1 where the layer has no part of that kind; the parameters of a part
// the layer does not have are zero.
struct LayerSpec {
  MixerKind mixer = MixerKind::Mamba1;
  FfnKind ffn = FfnKind::Dense;
  int64_t attn_index = -1;  // among the layers with attention: the A_n axis of a record
  int64_t ssm_index = -1;   // among the layers with an SSM: the M_n axis
  int64_t moe_index = -1;   // among the MoE layers: the X_n axis
  AttentionParams attn;
  SsmParams ssm;
  FfnParams ffn_params;
  bool has_attention() const { return attn_index >= 0; }
  bool has_ssm() const { return ssm_index >= 0; }
  bool is_moe() const { return moe_index >= 0; }
  bool operator==(const LayerSpec&) const = default;
};

class LayerSchedule {
 public:
  LayerSchedule() = default;  // no layers
  // Jamba (jamba-spec.md §1): attention where i % attn_layer_period == attn_layer_offset, Mamba-1
  // elsewhere; MoE where num_experts > 1 and i % expert_layer_period == expert_layer_offset, dense
  // elsewhere. Bamba: attention at attn_layer_indices, Mamba-2 elsewhere, dense everywhere.
  // Nemotron-H: its pattern, one part a layer: 'M' Mamba-2 without FFN, '*' attention without FFN,
  // '-' a relu² MLP without mixer. Granite 4.0-H: as Bamba, with MoE (routed experts and a shared
  // one) on every layer, or the shared MLP alone as a dense MLP. The parameters come from the config.
  static LayerSchedule from_config(const JambaConfig& c);
  // One mixer and one FFN kind per layer, the parameters shared by all. Throws LoadError (one line
  // starting with `source`, naming the layer) for lists of different lengths, no layers, a kind out
  // of range, or an MoE layer without at least 2 experts and 1..E experts per token.
  static LayerSchedule from_lists(const std::vector<MixerKind>& mixers, const std::vector<FfnKind>& ffns,
                                  const LayerParams& params, const std::string& source = "layer lists");

  int64_t size() const { return static_cast<int64_t>(layers_.size()); }  // L
  const LayerSpec& operator[](int64_t i) const { return layers_[static_cast<size_t>(i)]; }
  const std::vector<LayerSpec>& layers() const { return layers_; }
  const LayerParams& params() const { return params_; }
  std::vector<MixerKind> mixers() const;  // per layer, for from_lists
  std::vector<FfnKind> ffns() const;

  // Layer indices of each kind, increasing; their sizes are A_n, M_n and X_n.
  const std::vector<int64_t>& attention_layers() const { return attn_layers_; }
  const std::vector<int64_t>& ssm_layers() const { return ssm_layers_; }
  const std::vector<int64_t>& moe_layers() const { return moe_layers_; }
  int64_t num_attention() const { return static_cast<int64_t>(attn_layers_.size()); }  // A_n
  int64_t num_ssm() const { return static_cast<int64_t>(ssm_layers_.size()); }         // M_n
  int64_t num_moe() const { return static_cast<int64_t>(moe_layers_.size()); }         // X_n
  int64_t num_dense() const;                                                           // dense FFN layers

  // The ribbon strips, one letter a layer: "MMAMMMAM" and "DEDEDEDE".
  std::string mixer_strip() const;
  std::string ffn_strip() const;
  // One line: "8 layers: M M A M M M A M; MoE at 1,3,5,7" ("no MoE" when none; "no FFN at ..." too
  // when some layer has none).
  std::string describe() const;

  bool operator==(const LayerSchedule& o) const { return layers_ == o.layers_ && params_ == o.params_; }

 private:
  std::vector<LayerSpec> layers_;
  std::vector<int64_t> attn_layers_, ssm_layers_, moe_layers_;
  LayerParams params_;
};

// The inverse of from_config's rule for one kind: a (period, offset) under which exactly `count` of
// L layers are of the kind, preferring period L / count and offset period / 2 (Jamba's own
// placement); {L + 1, L} (no layer of the kind) when count is 0. False when none exists. Linear in L.
// Used where only the counts are known (a trace file holds no config).
bool jamba_period_offset(int64_t L, int64_t count, int64_t* period, int64_t* offset);

}  // namespace hl
