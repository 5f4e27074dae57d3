// Random-weight checkpoint generator (see generator.h): plans the tensors of jamba-spec.md §2.1/§2.2
// and trace-format.md §1, draws their values from per-tensor seeded streams, writes the files.
// Not the loader's name/shape checks (model/loader.cpp); this file only produces what they accept.
// Init reference: jamba-spec.md §3.12 and state-spaces/mamba mamba_simple.py (A_log, dt bias, D).
#include "engine/model/generator.h"
#include "engine/model/tensor_names.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/core/sys_memory.h"
#include "engine/core/thread_pool.h"
#include "engine/io/safetensors.h"
#include "engine/model/layer_schedule.h"

namespace hl {
namespace {

// ---- random numbers: splitmix64 seeding, xoshiro256** stream, Box-Muller normals ----

uint64_t splitmix64(uint64_t* x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t seed) {
    for (auto& w : s_) w = splitmix64(&seed);
  }
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

// ---- what each tensor's values are ----

enum class Init : uint8_t {
  Normal,   // N(0, scale)
  Uniform,  // U(-scale, scale)
  Const,    // scale
  ALog,     // log(1 + (j mod N)) : A_log = log(arange(1..N)) per row
  DtBias,   // inverse softplus of dt ~ logUniform[1e-3, 1e-1], dt >= 1e-4 (mamba_simple.py)
};

struct InitSpec {
  Init kind = Init::Const;
  double scale = 1.0;
  int64_t row = 1;  // ALog: N
};

// A contiguous run of a tensor's values drawn from the stream named `stream`. A tensor is one part,
// except fused experts (one part per expert and projection, so fused and per-expert checkpoints of
// the same seed hold the same values) and a tied-but-written lm_head (the embedding's stream).
struct Part {
  std::string stream;
  int64_t count = 0;
  InitSpec init;
};

struct TensorSpec {
  PlannedTensor t;
  std::vector<Part> parts;
};

constexpr int64_t kBlock = 1 << 16;  // values per independent RNG block (parallel, thread-count free)
constexpr int64_t kMaxDim = int64_t{1} << 31;

void fill_block(float* dst, int64_t n, const InitSpec& init, uint64_t block_seed, int64_t first_index) {
  switch (init.kind) {
    case Init::Const:
      std::fill(dst, dst + n, static_cast<float>(init.scale));
      return;
    case Init::ALog:
      for (int64_t j = 0; j < n; ++j) dst[j] = static_cast<float>(std::log(1.0 + double((first_index + j) % init.row)));
      return;
    default:
      break;
  }
  Xoshiro256 rng(block_seed);
  if (init.kind == Init::Normal) {
    const float sd = static_cast<float>(init.scale);
    constexpr float kTwoPi = 6.28318530717958647692f;
    for (int64_t j = 0; j < n; j += 2) {
      const uint64_t x = rng.next();  // one 64-bit draw gives both uniforms of the pair
      const float u1 = static_cast<float>((x >> 40) + 1) * 0x1.0p-24f;          // (0, 1]
      const float u2 = static_cast<float>((x >> 16) & 0xffffffu) * 0x1.0p-24f;  // [0, 1)
      const float r = std::sqrt(-2.0f * std::log(u1)) * sd;
      dst[j] = r * std::cos(kTwoPi * u2);
      if (j + 1 < n) dst[j + 1] = r * std::sin(kTwoPi * u2);
    }
  } else if (init.kind == Init::Uniform) {
    for (int64_t j = 0; j < n; ++j) dst[j] = static_cast<float>((2.0 * rng.uniform() - 1.0) * init.scale);
  } else {  // DtBias
    const double lo = std::log(1e-3), hi = std::log(1e-1);
    for (int64_t j = 0; j < n; ++j) {
      double dt = std::max(std::exp(lo + rng.uniform() * (hi - lo)), 1e-4);
      dst[j] = static_cast<float>(dt + std::log(-std::expm1(-dt)));  // softplus(dst) == dt
    }
  }
}

void fill_part(float* dst, const Part& p, uint64_t seed) {
  uint64_t s = seed ^ fnv1a(p.stream);
  const uint64_t stream_seed = splitmix64(&s);
  const int64_t blocks = (p.count + kBlock - 1) / kBlock;
  ThreadPool::global().parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      uint64_t bs = stream_seed + static_cast<uint64_t>(b) * 0xd1b54a32d192ed03ull;
      const int64_t first = b * kBlock;
      fill_block(dst + first, std::min(kBlock, p.count - first), p.init, splitmix64(&bs), first);
    }
  });
}

// ---- the plan ----

std::string layer_prefix(int64_t i) {
  return "model.layers." + std::to_string(i) + ".";
}

DType tensor_dtype(const GenerateOptions& o, const std::string& name) {
  if (!o.mixed_dtypes) return o.dtype;
  static constexpr DType kChoices[3] = {DType::F32, DType::F16, DType::BF16};
  return kChoices[fnv1a("dtype:" + name) % 3];
}

void check_config(const JambaConfig& c) {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw Error("generate: config " + what);
  };
  auto dim = [&](int64_t v, const char* field) {
    need(v >= 1 && v < kMaxDim,
         std::string(field) + " = " + std::to_string(v) + ", allowed 1.." + std::to_string(kMaxDim - 1));
  };
  dim(c.vocab_size, "vocab_size");
  dim(c.hidden_size, "hidden_size");
  dim(c.intermediate_size, "intermediate_size");
  dim(c.num_hidden_layers, "num_hidden_layers");
  dim(c.num_attention_heads, "num_attention_heads");
  dim(c.num_key_value_heads, "num_key_value_heads");
  dim(c.num_experts, "num_experts");
  dim(c.num_experts_per_tok, "num_experts_per_tok");
  dim(c.attn_layer_period, "attn_layer_period");
  dim(c.expert_layer_period, "expert_layer_period");
  dim(c.mamba_d_state, "mamba_d_state");
  dim(c.mamba_d_conv, "mamba_d_conv");
  dim(c.mamba_expand, "mamba_expand");
  dim(c.mamba_dt_rank, "mamba_dt_rank");
  need(c.num_hidden_layers <= 4096, "num_hidden_layers = " + std::to_string(c.num_hidden_layers) + ", allowed 1..4096");
  need(c.num_experts <= 4096, "num_experts = " + std::to_string(c.num_experts) + ", allowed 1..4096");
  need(c.head_dim_explicit > 0 || c.hidden_size % c.num_attention_heads == 0, "hidden_size " + std::to_string(c.hidden_size) +
                                                       " is not a multiple of num_attention_heads " +
                                                       std::to_string(c.num_attention_heads));
  need(c.num_attention_heads % c.num_key_value_heads == 0,
       "num_attention_heads " + std::to_string(c.num_attention_heads) + " is not a multiple of num_key_value_heads " +
           std::to_string(c.num_key_value_heads));
  need(c.num_experts_per_tok <= c.num_experts, "num_experts_per_tok = " + std::to_string(c.num_experts_per_tok) +
                                                   ", allowed 1..num_experts (" + std::to_string(c.num_experts) + ")");
  need(c.attn_layer_offset >= 0 && c.attn_layer_offset < c.attn_layer_period,
       "attn_layer_offset = " + std::to_string(c.attn_layer_offset) + ", allowed 0..attn_layer_period-1");
  need(c.expert_layer_offset >= 0 && c.expert_layer_offset < c.expert_layer_period,
       "expert_layer_offset = " + std::to_string(c.expert_layer_offset) + ", allowed 0..expert_layer_period-1");
  need(c.mamba_expand * c.hidden_size < kMaxDim, "mamba_expand * hidden_size is too large");
  need(c.num_register_tokens >= 0 && c.num_register_tokens <= (1 << 20),
       "num_register_tokens = " + std::to_string(c.num_register_tokens) + ", allowed 0..1048576");
}

// Refuses tensors whose element count overflows or exceeds 2^44 (checked multiply).
void check_numel(const PlannedTensor& t) {
  int64_t n = 1;
  for (int64_t d : t.shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n) || n > (int64_t{1} << 44))
      throw Error("generate: tensor '" + t.name + "' is too large (more than 2^44 elements)");
}

// The config as written: dt_rank "auto" resolved, registers and dtype hint from the options.
JambaConfig effective_config(const GenerateOptions& o) {
  JambaConfig c = o.config;
  if (c.mamba_dt_rank_auto) c.mamba_dt_rank = (c.hidden_size + 15) / 16;
  c.num_register_tokens = o.trained_registers;
  if (o.mixed_dtypes || o.dtype == DType::BF16)
    c.torch_dtype = "bfloat16";
  else if (o.dtype == DType::F16)
    c.torch_dtype = "float16";
  else
    c.torch_dtype = "float32";
  return c;
}

// Scales: input-side matrices N(0, fan_in^-1/2) (outputs of RMS ~1 from normalised inputs); residual
// outputs (o_proj, out_proj, down_proj) additionally / sqrt(2L); router N(0, H^-1/2) (varied routing);
// lm_head N(0, H^-1/2) (logits of std ~1); conv U(±W^-1/2) as PyTorch's Conv1d default; dt_proj.weight
// U(±R^-1/2), dt_proj.bias = softplus^-1(dt), dt ~ logUniform[1e-3, 1e-1]; A_log = log(1..N); D = 1;
// norms 1; sinks N(0, 1); proj biases N(0, 0.02) (nonzero, so that a loader that drops them is caught).
std::vector<TensorSpec> build_specs(const GenerateOptions& o) {
  if (o.dtype != DType::F32 && o.dtype != DType::F16 && o.dtype != DType::BF16)
    throw Error(std::string("generate: dtype ") + dtype_name(o.dtype) + " not allowed (F32, F16 or BF16)");
  if (o.trained_registers < 0 || o.trained_registers > (1 << 20))
    throw Error("generate: registers = " + std::to_string(o.trained_registers) + ", allowed 0..1048576");
  const JambaConfig c = effective_config(o);
  check_config(c);
  const int64_t H = c.hidden_size, I = c.intermediate_size, L = c.num_hidden_layers, V = c.vocab_size;
  const int64_t nh = c.num_attention_heads, nkv = c.num_key_value_heads, hd = c.head_dim();
  const int64_t E = c.num_experts, Di = c.mamba_inner(), N = c.mamba_d_state, W = c.mamba_d_conv;
  const int64_t R = c.mamba_dt_rank;
  const LayerSchedule sched = LayerSchedule::from_config(c);
  const double out_scale = 1.0 / std::sqrt(2.0 * double(L));  // residual branches: / sqrt(2L)
  auto lin = [](int64_t fan_in) { return 1.0 / std::sqrt(double(fan_in)); };

  std::vector<TensorSpec> specs;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, InitSpec init) {
    TensorSpec s;
    s.t.name = name;
    s.t.shape = std::move(shape);
    s.t.dtype = tensor_dtype(o, name);
    check_numel(s.t);
    s.parts.push_back(Part{name, s.t.numel(), init});
    specs.push_back(std::move(s));
  };
  const InitSpec one{Init::Const, 1.0};
  // The E experts' matrices under `f`: per expert, each part its own tensor "experts.{e}.<proj>.weight"
  // (the experts in turn), or stacked: one tensor per group of parts, each expert's parts in turn
  // (Jamba v5's gate_up (E, 2I, H) = [gate; up] per expert, spec §2.2; HF Nemotron-H's (E, I, H)).
  struct ExpertPart {
    const char* proj;
    int64_t rows, cols;
    InitSpec init;
  };
  using ExpertStack = std::pair<std::string, std::vector<ExpertPart>>;
  auto add_experts = [&](const std::string& f, bool stacked, const std::vector<ExpertStack>& stacks) {
    auto name = [&](int64_t e, const char* proj) { return f + "experts." + std::to_string(e) + "." + proj + ".weight"; };
    for (int64_t e = 0; e < c.num_experts && !stacked; ++e)
      for (const ExpertStack& st : stacks)
        for (const ExpertPart& p : st.second) add(name(e, p.proj), {p.rows, p.cols}, p.init);
    for (const ExpertStack& st : stacks) {
      if (!stacked) break;
      TensorSpec t;
      int64_t rows = 0;
      for (const ExpertPart& p : st.second) rows += p.rows;
      t.t = {f + st.first, {c.num_experts, rows, st.second[0].cols}, tensor_dtype(o, f + st.first)};
      for (int64_t e = 0; e < c.num_experts; ++e)
        for (const ExpertPart& p : st.second) t.parts.push_back(Part{name(e, p.proj), p.rows * p.cols, p.init});
      check_numel(t.t);
      specs.push_back(std::move(t));
    }
  };
  auto normal = [](double sd) { return InitSpec{Init::Normal, sd}; };
  auto uniform = [](double bound) { return InitSpec{Init::Uniform, bound}; };

  // Embeddings N(0, H^-1/4): the residual stream starts at RMS H^-1/4 (0.21 at H = 512) and grows
  // through depth as the layers add to it, instead of being dominated by the embedding; a tied head
  // then gives logits of std H^(1/4).
  const bool tied = c.tie_word_embeddings;
  const InitSpec embed_init = normal(std::pow(double(H), -0.25));
  add("model.embed_tokens.weight", {V, H}, embed_init);

  for (int64_t i = 0; i < L; ++i) {
    const std::string p = layer_prefix(i);
    if (mixer_present(sched[i].mixer)) add(p + "input_layernorm.weight", {H}, one);
    if (sched[i].has_attention()) {
      add(p + "self_attn.q_proj.weight", {nh * hd, H}, normal(lin(H)));
      add(p + "self_attn.k_proj.weight", {nkv * hd, H}, normal(lin(H)));
      add(p + "self_attn.v_proj.weight", {nkv * hd, H}, normal(lin(H)));
      add(p + "self_attn.o_proj.weight", {H, nh * hd}, normal(lin(nh * hd) * out_scale));
      if (o.sinks) add(p + "self_attn.sinks", {nh}, normal(1.0));
      if (c.attention_bias) {
        for (const char* proj : {"q", "k", "v"})
          add(p + "self_attn." + proj + "_proj.bias", {(proj[0] == 'q' ? nh : nkv) * hd}, normal(0.1));
        add(p + "self_attn.o_proj.bias", {H}, normal(0.02));
      }
    }
    const bool mamba2 = sched[i].mixer == MixerKind::Mamba2 || sched[i].mixer == MixerKind::Parallel;
    if (mamba2) {  // HF Bamba's BambaMixer (mixer_mamba2.h); Falcon-H1's beside the attention
      const std::string m = p + "mamba.";
      const int64_t conv = c.mamba2_conv_dim(), heads = c.mamba_n_heads, proj = Di + conv + heads;
      add(m + "in_proj.weight", {proj, H}, normal(lin(H)));
      if (c.mamba_proj_bias) add(m + "in_proj.bias", {proj}, normal(0.02));
      add(m + "conv1d.weight", {conv, 1, W}, uniform(lin(W)));
      if (c.mamba_conv_bias) add(m + "conv1d.bias", {conv}, uniform(lin(W)));
      add(m + "dt_bias", {heads}, InitSpec{Init::DtBias, 1.0});
      add(m + "A_log", {heads}, InitSpec{Init::ALog, 1.0, 16});  // A = −(1..16) over the heads, as HF's U[1, 16]
      add(m + "D", {heads}, one);
      if (c.mamba_rms_norm) add(m + "norm.weight", {Di}, one);
      add(m + "out_proj.weight", {H, Di}, normal(lin(Di) * out_scale));
      if (c.mamba2_out_bias()) add(m + "out_proj.bias", {H}, normal(0.02));
    } else if (sched[i].mixer == MixerKind::Mamba1) {
      const std::string m = p + "mamba.";
      add(m + "in_proj.weight", {2 * Di, H}, normal(lin(H)));
      if (c.mamba_proj_bias) add(m + "in_proj.bias", {2 * Di}, normal(0.02));
      add(m + "conv1d.weight", {Di, 1, W}, uniform(lin(W)));  // PyTorch Conv1d default bound 1/sqrt(W)
      if (c.mamba_conv_bias) add(m + "conv1d.bias", {Di}, uniform(lin(W)));
      add(m + "x_proj.weight", {R + 2 * N, Di}, normal(lin(Di)));
      add(m + "dt_layernorm.weight", {R}, one);
      add(m + "b_layernorm.weight", {N}, one);
      add(m + "c_layernorm.weight", {N}, one);
      add(m + "dt_proj.weight", {Di, R}, uniform(lin(R)));
      add(m + "dt_proj.bias", {Di}, InitSpec{Init::DtBias, 1.0});
      add(m + "A_log", {Di, N}, InitSpec{Init::ALog, 1.0, N});
      add(m + "D", {Di}, one);
      add(m + "out_proj.weight", {H, Di}, normal(lin(Di) * out_scale));
      if (c.mamba_proj_bias) add(m + "out_proj.bias", {H}, normal(0.02));
    }
    if (sched[i].ffn == FfnKind::None) continue;  // a mixer-only layer (Nemotron-H's M, *)
    add(p + "pre_ff_layernorm.weight", {H}, one);
    const std::string f = p + "feed_forward.";
    // Granite's shared MLP, stored fused: gate_up (2I, H) [gate rows; up rows], down (H, I).
    auto add_fused_mlp = [&](const std::string& q, int64_t width) {
      TensorSpec gu;
      gu.t.name = q + "gate_up_proj";
      gu.t.shape = {2 * width, H};
      gu.t.dtype = tensor_dtype(o, gu.t.name);
      gu.parts.push_back(Part{q + "gate_proj.weight", width * H, normal(lin(H))});
      gu.parts.push_back(Part{q + "up_proj.weight", width * H, normal(lin(H))});
      check_numel(gu.t);
      specs.push_back(std::move(gu));
      add(q + "down_proj", {H, width}, normal(lin(width) * out_scale));
    };
    const bool granite = c.family == Family::GraniteH;
    if (granite && !sched[i].is_moe()) {
      add_fused_mlp(f + "shared.", sched[i].ffn_params.d_ff);
      continue;
    }
    if (sched[i].is_moe() && sched[i].ffn_params.sigmoid_router) {  // Nemotron-H's (loader.cpp bind_sigmoid_moe)
      const FfnParams& fp = sched[i].ffn_params;
      const int64_t Ie = fp.d_ff, Lat = fp.latent, Hin = Lat > 0 ? Lat : H, Is = fp.shared_d_ff;
      add(f + "gate.weight", {E, H}, normal(2.0 * lin(H)));
      add(f + "gate.e_score_correction_bias", {E}, normal(0.05));  // moves some choices, as a trained one does
      specs.back().t.dtype = DType::F32;                             // HF keeps it fp32
      if (Lat > 0) {
        add(f + "fc1_latent_proj.weight", {Lat, H}, normal(lin(H)));
        add(f + "fc2_latent_proj.weight", {H, Lat}, normal(lin(Lat) * out_scale));
        if (c.mlp_bias) add(f + "fc1_latent_proj.bias", {Lat}, normal(0.02));
        if (c.mlp_bias) add(f + "fc2_latent_proj.bias", {H}, normal(0.02));
      }
      add_experts(f, o.fused_experts,
                  {{"experts.up_proj", {{"up_proj", Ie, Hin, normal(lin(Hin))}}},  // HF's stacked (E, I, Hin)
                   {"experts.down_proj", {{"down_proj", Hin, Ie, normal(lin(Ie) * out_scale)}}}});
      add(f + "shared_experts.up_proj.weight", {Is, H}, normal(lin(H)));
      add(f + "shared_experts.down_proj.weight", {H, Is}, normal(lin(Is) * out_scale));
      if (c.mlp_bias) add(f + "shared_experts.up_proj.bias", {Is}, normal(0.02));
      if (c.mlp_bias) add(f + "shared_experts.down_proj.bias", {H}, normal(0.02));
    } else if (sched[i].is_moe()) {
      add(f + "router.weight", {E, H}, normal(lin(H)));
      if (sched[i].ffn_params.shared_d_ff > 0) add_fused_mlp(f + "shared.", sched[i].ffn_params.shared_d_ff);
      add_experts(f, o.fused_experts || granite,  // Granite stores its experts fused only
                  {{"experts.gate_up_proj", {{"gate_proj", I, H, normal(lin(H))}, {"up_proj", I, H, normal(lin(H))}}},
                   {"experts.down_proj", {{"down_proj", H, I, normal(lin(I) * out_scale)}}}});
    } else {
      if (sched[i].ffn_params.gated) add(f + "gate_proj.weight", {I, H}, normal(lin(H)));
      add(f + "up_proj.weight", {I, H}, normal(lin(H)));
      add(f + "down_proj.weight", {H, I}, normal(lin(I) * out_scale));
      if (c.mlp_bias) {
        if (sched[i].ffn_params.gated) add(f + "gate_proj.bias", {I}, normal(0.02));
        add(f + "up_proj.bias", {I}, normal(0.02));
        add(f + "down_proj.bias", {H}, normal(0.02));
      }
    }
  }
  add("model.final_layernorm.weight", {H}, one);
  if (!tied) {
    add("lm_head.weight", {V, H}, normal(lin(H)));
  } else if (!o.omit_lm_head_when_tied) {
    add("lm_head.weight", {V, H}, embed_init);
    specs.back().parts[0].stream = "model.embed_tokens.weight";  // same values as the embedding
  }
  if (o.trained_registers > 0) add("model.register_tokens", {o.trained_registers, H}, embed_init);
  // The family's spelling of the names (Nemotron-H: under "backbone." as NVIDIA publishes them); the
  // streams keep Jamba's names, so a tensor's values do not depend on the family's spelling.
  for (TensorSpec& t : specs) t.t.name = family_tensor_name(c, "backbone.", t.t.name);
  return specs;
}

// Contiguous, balanced by bytes, every shard non-empty.
void assign_shards(std::vector<TensorSpec>* specs, int shards) {
  const int64_t count = static_cast<int64_t>(specs->size());
  if (shards < 1 || shards > 99999 || shards > count)
    throw Error("generate: shards = " + std::to_string(shards) + ", allowed 1.." +
                std::to_string(std::min<int64_t>(count, 99999)) + " (number of tensors)");
  long double total = 0, before = 0;
  for (const auto& s : *specs) total += static_cast<long double>(s.t.nbytes());
  int prev = 0;
  for (int64_t i = 0; i < count; ++i) {
    TensorSpec& s = (*specs)[i];
    const long double mid = before + static_cast<long double>(s.t.nbytes()) / 2;
    int raw = total > 0 ? static_cast<int>(mid * shards / total) : 0;
    raw = std::min(raw, shards - 1);
    const int least = static_cast<int>(std::max<int64_t>(0, (shards - 1) - (count - 1 - i)));
    int sh = std::max({raw, prev, least});
    sh = std::min(sh, i == 0 ? 0 : prev + 1);
    s.t.shard = sh;
    prev = sh;
    before += static_cast<long double>(s.t.nbytes());
  }
}

std::string gib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / double(uint64_t{1} << 30));
  return buf;
}

bool is_model_file_name(const std::string& n) {
  if (n == "model.safetensors" || n == "model.safetensors.index.json") return true;
  // model-00001-of-00003.safetensors
  if (n.size() != 32 || n.compare(0, 6, "model-") != 0 || n.compare(11, 4, "-of-") != 0 ||
      n.compare(20, 12, ".safetensors") != 0)
    return false;
  for (int k : {6, 7, 8, 9, 10, 15, 16, 17, 18, 19})
    if (n[k] < '0' || n[k] > '9') return false;
  return true;
}

}  // namespace

int64_t PlannedTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<std::string> shard_file_names(int shards) {
  if (shards <= 1) return {"model.safetensors"};
  std::vector<std::string> names;
  for (int k = 1; k <= shards; ++k) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", k, shards);
    names.emplace_back(buf);
  }
  return names;
}

std::vector<PlannedTensor> plan_checkpoint(const GenerateOptions& opts) {
  std::vector<TensorSpec> specs = build_specs(opts);
  assign_shards(&specs, opts.shards);
  std::vector<PlannedTensor> out;
  out.reserve(specs.size());
  for (auto& s : specs) out.push_back(std::move(s.t));
  return out;
}

JambaConfig generated_config(const GenerateOptions& opts) {
  return effective_config(opts);
}

void generate_checkpoint(const std::string& out_dir, const GenerateOptions& opts) {
  namespace fs = std::filesystem;
  if (out_dir.empty()) throw Error("generate: no output folder given");
  std::vector<TensorSpec> specs = build_specs(opts);
  assign_shards(&specs, opts.shards);
  const JambaConfig config = effective_config(opts);
  std::string config_text = config_to_json(config);
  try {
    (void)parse_config(config_text, "generated config.json");  // what we write must load
  } catch (const Error& e) {
    throw Error(std::string("generate: the config would not load: ") + e.what());
  }

  // Memory: a shard's converted bytes are held by the writer and once more while serialised,
  // plus one tensor's float values.
  const std::vector<std::string> files = shard_file_names(opts.shards);
  std::vector<uint64_t> shard_bytes(files.size(), 0);
  uint64_t total_bytes = 0, max_floats = 0;
  for (const auto& s : specs) {
    shard_bytes[s.t.shard] += s.t.nbytes();
    total_bytes += s.t.nbytes();
    max_floats = std::max<uint64_t>(max_floats, static_cast<uint64_t>(s.t.numel()));
  }
  const AvailableMemory avail = available_memory();
  const uint64_t budget = opts.memory_budget_bytes ? opts.memory_budget_bytes : avail.bytes / 2;
  for (size_t k = 0; k < files.size(); ++k) {
    const uint64_t need = 2 * shard_bytes[k] + 4 * max_floats;
    if (need > budget)
      throw Error("generate: " + files[k] + " needs about " + gib(need) + " of memory while written (budget " +
                  gib(budget) + (opts.memory_budget_bytes ? "" : ", half of " + describe(avail)) +
                  "); use more shards");
  }

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (!fs::is_directory(out_dir)) throw Error("generate: cannot create output folder '" + out_dir + "'");

  const fs::space_info space = fs::space(out_dir, ec);
  if (!ec && space.available < total_bytes + (uint64_t{1} << 20))
    throw Error("generate: the checkpoint needs about " + gib(total_bytes) + " on disk, '" + out_dir + "' has " +
                gib(space.available) + " free");

  std::vector<float> values;   // (numel,) of the tensor being generated
  std::vector<uint8_t> bytes;  // (nbytes,) the same, converted
  size_t next = 0;
  for (size_t k = 0; k < files.size(); ++k) {
    SafetensorsWriter writer;
    writer.set_metadata("format", "pt");
    for (; next < specs.size() && static_cast<size_t>(specs[next].t.shard) == k; ++next) {
      const TensorSpec& s = specs[next];
      const int64_t n = s.t.numel();
      values.resize(static_cast<size_t>(n));
      int64_t off = 0;
      for (const Part& p : s.parts) {
        fill_part(values.data() + off, p, opts.seed);
        off += p.count;
      }
      bytes.resize(s.t.nbytes());
      const int esz = dtype_size(s.t.dtype);
      ThreadPool::global().parallel_for(n, kBlock, [&](int64_t b, int64_t e) {
        from_float(s.t.dtype, values.data() + b, bytes.data() + b * esz, static_cast<size_t>(e - b));
      });
      writer.add(s.t.name, s.t.dtype, s.t.shape, bytes.data(), bytes.size());
    }
    writer.write((fs::path(out_dir) / files[k]).string());
  }
  values = {};
  bytes = {};

  if (files.size() > 1) {
    nlohmann::json weight_map = nlohmann::json::object();
    for (const auto& s : specs) weight_map[s.t.name] = files[s.t.shard];
    nlohmann::json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
    const std::string text = index.dump(2) + "\n";
    write_file_atomic((fs::path(out_dir) / "model.safetensors.index.json").string(), text.data(), text.size());
  }
  write_file_atomic((fs::path(out_dir) / "config.json").string(), config_text.data(), config_text.size());

  // Remove model files of a previous, different layout so that the folder has one consistent set.
  std::vector<std::string> written = files;
  if (files.size() > 1) written.emplace_back("model.safetensors.index.json");
  for (const auto& entry : fs::directory_iterator(out_dir, ec)) {
    const std::string n = entry.path().filename().string();
    if (is_model_file_name(n) && std::find(written.begin(), written.end(), n) == written.end())
      fs::remove(entry.path(), ec);
  }
}

}  // namespace hl
