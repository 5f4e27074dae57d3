// The layer schedule (layer_schedule.h): built from per-layer kind lists, which Jamba's period/offset
// rule (jamba-spec.md §1) produces in from_config; the one-line description `info` and the GUI print;
// and the rule's inverse for a trace without a config. Not the per-layer weights (model/loader.cpp).
#include "engine/model/layer_schedule.h"

#include <algorithm>
#include <iterator>
#include <cstdlib>
#include <string>

#include "engine/core/error.h"

namespace hl {

namespace {

struct MixerKindRow {
  MixerKind kind;
  const char* name;
  char letter;
  bool attention, ssm;
};
constexpr MixerKindRow kMixerKindRows[] = {
#define HL_MIXER_KIND(e, name, letter, attn, ssm) {MixerKind::e, name, letter, attn, ssm},
#include "engine/model/mixer_kinds.def"
#undef HL_MIXER_KIND
};

const MixerKindRow* mixer_row(MixerKind k) {
  const auto i = static_cast<size_t>(k);
  return i < std::size(kMixerKindRows) ? &kMixerKindRows[i] : nullptr;
}

// "attention (0) or mamba (1)": the kinds a message may expect ("a (0), b (1) or c (2)" for three).
std::string mixer_kind_list() {
  std::string s;
  const size_t n = std::size(kMixerKindRows);
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) s += i + 1 == n ? " or " : ", ";
    s += std::string(kMixerKindRows[i].name) + " (" + std::to_string(i) + ")";
  }
  return s;
}

}  // namespace

const char* mixer_name(MixerKind k) {
  const MixerKindRow* r = mixer_row(k);
  return r ? r->name : "?";
}

bool mixer_has_attention(MixerKind k) {
  const MixerKindRow* r = mixer_row(k);
  return r && r->attention;
}

bool mixer_has_ssm(MixerKind k) {
  const MixerKindRow* r = mixer_row(k);
  return r && r->ssm;
}

const char* ffn_name(FfnKind k) {
  switch (k) {
    case FfnKind::Dense: return "dense";
    case FfnKind::MoE: return "moe";
    case FfnKind::None: return "none";
  }
  return "?";
}

char mixer_letter(MixerKind k) {
  const MixerKindRow* r = mixer_row(k);
  return r ? r->letter : '?';
}

char ffn_letter(FfnKind k) {
  return k == FfnKind::MoE ? 'E' : k == FfnKind::Dense ? 'D' : '-';
}

bool parse_mixer_kind(const std::string& s, MixerKind* out) {
  for (const MixerKindRow& r : kMixerKindRows)
    if (s == r.name) {
      *out = r.kind;
      return true;
    }
  return false;
}

bool parse_ffn_kind(const std::string& s, FfnKind* out) {
  for (FfnKind k : {FfnKind::Dense, FfnKind::MoE, FfnKind::None})
    if (s == ffn_name(k)) {
      *out = k;
      return true;
    }
  return false;
}

LayerSchedule LayerSchedule::from_config(const JambaConfig& c) {
  const int64_t L = std::max<int64_t>(0, c.num_hidden_layers);
  std::vector<MixerKind> mixers(static_cast<size_t>(L));
  std::vector<FfnKind> ffns(static_cast<size_t>(L));
  const bool nemotron = c.family == Family::NemotronH, falcon = c.family == Family::FalconH1;
  for (int64_t i = 0; falcon && i < L; ++i) {  // Falcon-H1: attention ∥ Mamba-2, then a SwiGLU MLP, every layer
    mixers[static_cast<size_t>(i)] = MixerKind::Parallel;
    ffns[static_cast<size_t>(i)] = FfnKind::Dense;
  }
  for (int64_t i = 0; nemotron && i < L; ++i) {
    const char k = i < static_cast<int64_t>(c.layer_pattern.size()) ? c.layer_pattern[static_cast<size_t>(i)] : '?';
    mixers[static_cast<size_t>(i)] = k == '*' ? MixerKind::Attention : k == 'M' ? MixerKind::Mamba2 : MixerKind::None;
    ffns[static_cast<size_t>(i)] = k == '-' ? FfnKind::Dense : k == 'E' ? FfnKind::MoE : FfnKind::None;
  }
  for (int64_t i = 0; !nemotron && !falcon && i < L; ++i) {
    const bool bamba = c.family == Family::Bamba || c.family == Family::GraniteH;  // attention by index
    const bool attn = bamba ? std::count(c.attn_layer_indices.begin(), c.attn_layer_indices.end(), i) > 0
                            : c.attn_layer_period > 0 && i % c.attn_layer_period == c.attn_layer_offset;
    const bool moe = c.family == Family::GraniteH ? c.num_experts > 1  // Granite: experts on every layer
                     : !bamba && c.num_experts > 1 && c.expert_layer_period > 0 &&
                           i % c.expert_layer_period == c.expert_layer_offset;
    mixers[static_cast<size_t>(i)] = attn ? MixerKind::Attention : bamba ? MixerKind::Mamba2 : MixerKind::Mamba1;
    ffns[static_cast<size_t>(i)] = moe ? FfnKind::MoE : FfnKind::Dense;
  }
  LayerParams p;
  p.attn = {c.num_attention_heads, c.num_key_value_heads, c.num_attention_heads > 0 ? c.head_dim() : 0,
            c.num_attention_heads > 0 ? c.rotary_dim() : 0, c.rope_theta};
  if (c.family != Family::Jamba)
    p.ssm = {c.mamba_inner(), c.mamba_d_state, c.mamba_d_conv, 0, c.mamba_n_heads, c.mamba_n_groups};
  else
    p.ssm = {c.mamba_inner(), c.mamba_d_state, c.mamba_d_conv, c.mamba_dt_rank};
  // Granite without routed experts: the shared MLP is the layer's dense MLP.
  const bool shared_only = c.family == Family::GraniteH && c.num_experts < 2;
  p.ffn = {shared_only ? c.shared_intermediate_size : c.intermediate_size, c.num_experts, c.num_experts_per_tok,
           c.mlp_gated(), shared_only ? 0 : c.shared_intermediate_size, c.moe_renormalize,
           c.mlp_gate_multiplier, c.mlp_down_multiplier};
  p.ffn.sigmoid_router = c.moe_sigmoid_router;
  p.ffn.groups = c.moe_n_group;
  p.ffn.topk_groups = c.moe_topk_group;
  p.ffn.routed_scaling = c.moe_routed_scaling;
  p.ffn.latent = c.moe_latent_size;
  p.ffn.expert_d_ff = c.moe_intermediate_size;
  return from_lists(mixers, ffns, p, "config.json");
}

LayerSchedule LayerSchedule::from_lists(const std::vector<MixerKind>& mixers, const std::vector<FfnKind>& ffns,
                                        const LayerParams& params, const std::string& source) {
  auto fail = [&](const std::string& what) { throw LoadError(source + ": " + what); };
  if (mixers.size() != ffns.size())
    fail(std::to_string(mixers.size()) + " mixer kinds and " + std::to_string(ffns.size()) +
         " FFN kinds, expected one of each per layer");
  if (mixers.empty()) fail("no layers, expected at least 1");
  LayerSchedule s;
  s.params_ = params;
  s.layers_.resize(mixers.size());
  for (size_t i = 0; i < mixers.size(); ++i) {
    const int64_t li = static_cast<int64_t>(i);
    const std::string at = "layer " + std::to_string(i) + ": ";
    LayerSpec& l = s.layers_[i];
    l.mixer = mixers[i];
    l.ffn = ffns[i];
    if (!mixer_row(l.mixer))
      fail(at + "mixer kind " + std::to_string(static_cast<int>(l.mixer)) + ", expected " + mixer_kind_list());
    if (mixer_has_attention(l.mixer)) {
      l.attn_index = s.num_attention();
      l.attn = params.attn;
      s.attn_layers_.push_back(li);
    }
    if (mixer_has_ssm(l.mixer)) {
      l.ssm_index = s.num_ssm();
      l.ssm = params.ssm;
      s.ssm_layers_.push_back(li);
    }
    switch (l.ffn) {
      case FfnKind::MoE:
        if (params.ffn.experts < 2)
          fail(at + "an MoE layer with " + std::to_string(params.ffn.experts) + " experts, expected at least 2");
        if (params.ffn.top_k < 1 || params.ffn.top_k > params.ffn.experts)
          fail(at + "an MoE layer with " + std::to_string(params.ffn.top_k) + " experts per token, expected 1.." +
               std::to_string(params.ffn.experts));
        if (params.ffn.sigmoid_router) {  // DeepSeek-V3's grouped choice: the groups' top-2 sums need 2 a group
          const int64_t G = params.ffn.groups;
          if (G < 1 || params.ffn.experts % G != 0 || (G > 1 && params.ffn.experts / G < 2))
            fail(at + "an MoE layer of " + std::to_string(params.ffn.experts) + " experts in " + std::to_string(G) +
                 " groups, expected a divisor of the experts leaving at least 2 in each group");
          if (params.ffn.topk_groups < 1 || params.ffn.topk_groups > G)
            fail(at + "an MoE layer choosing among " + std::to_string(params.ffn.topk_groups) + " of " +
                 std::to_string(G) + " expert groups, expected 1.." + std::to_string(G));
        }
        l.moe_index = s.num_moe();
        l.ffn_params = params.ffn;
        if (params.ffn.expert_d_ff > 0) l.ffn_params.d_ff = params.ffn.expert_d_ff;
        s.moe_layers_.push_back(li);
        break;
      case FfnKind::Dense:
        l.ffn_params.d_ff = params.ffn.d_ff;
        l.ffn_params.gated = params.ffn.gated;
        l.ffn_params.gate_multiplier = params.ffn.gate_multiplier;
        l.ffn_params.down_multiplier = params.ffn.down_multiplier;
        break;
      case FfnKind::None: break;
      default:
        fail(at + "FFN kind " + std::to_string(static_cast<int>(l.ffn)) + ", expected dense (0), moe (1) or none (2)");
    }
  }
  return s;
}

std::vector<MixerKind> LayerSchedule::mixers() const {
  std::vector<MixerKind> v;
  for (const LayerSpec& l : layers_) v.push_back(l.mixer);
  return v;
}

std::vector<FfnKind> LayerSchedule::ffns() const {
  std::vector<FfnKind> v;
  for (const LayerSpec& l : layers_) v.push_back(l.ffn);
  return v;
}

int64_t LayerSchedule::num_dense() const {
  return std::count_if(layers_.begin(), layers_.end(), [](const LayerSpec& l) { return l.ffn == FfnKind::Dense; });
}

std::string LayerSchedule::mixer_strip() const {
  std::string s;
  for (const LayerSpec& l : layers_) s += mixer_letter(l.mixer);
  return s;
}

std::string LayerSchedule::ffn_strip() const {
  std::string s;
  for (const LayerSpec& l : layers_) s += ffn_letter(l.ffn);
  return s;
}

std::string LayerSchedule::describe() const {
  std::string s = std::to_string(size()) + (size() == 1 ? " layer:" : " layers:");
  for (const LayerSpec& l : layers_) s += std::string(" ") + mixer_letter(l.mixer);
  auto list = [&](auto is) {  // "1,3,5": the layers `is` holds for
    std::string r;
    for (int64_t i = 0; i < size(); ++i)
      if (is(layers_[static_cast<size_t>(i)])) {
        if (!r.empty()) r += ',';
        r += std::to_string(i);
      }
    return r;
  };
  s += moe_layers_.empty() ? "; no MoE" : "; MoE at " + list([](const LayerSpec& l) { return l.is_moe(); });
  const std::string none = list([](const LayerSpec& l) { return l.ffn == FfnKind::None; });
  if (!none.empty()) s += "; no FFN at " + none;
  const std::string bare = list([](const LayerSpec& l) { return !mixer_present(l.mixer); });
  if (!bare.empty()) s += "; no mixer at " + bare;
  return s;
}

bool jamba_period_offset(int64_t L, int64_t count, int64_t* period, int64_t* offset) {
  if (count <= 0) {
    *period = L + 1;
    *offset = L;
    return true;
  }
  if (count > L || L > (int64_t{1} << 40)) return false;  // (the bound keeps count · p in range)
  if (L % count == 0) {
    const int64_t p = L / count;
    *period = p;
    *offset = p / 2;
    return true;
  }
  // Layers i < L with i % p == o number (L - 1 - o) / p + 1 for o < L, which is `count` exactly when
  // L - count·p <= o <= L - 1 - (count - 1)·p: for each p the best offset is p / 2 clamped into
  // that range (and [0, p - 1]), so one pass over p finds the minimum of |o - p/2|·(L + 1) + p.
  int64_t best = -1;
  for (int64_t p = 1; p <= L; ++p) {
    const int64_t lo = std::max<int64_t>(0, L - count * p), hi = std::min<int64_t>(p - 1, L - 1 - (count - 1) * p);
    if (lo > hi) continue;
    const int64_t o = std::clamp<int64_t>(p / 2, lo, hi);
    const int64_t score = std::llabs(o - p / 2) * (L + 1) + p;
    if (best < 0 || score < best) {
      best = score;
      *period = p;
      *offset = o;
    }
  }
  return best >= 0;
}

}  // namespace hl
