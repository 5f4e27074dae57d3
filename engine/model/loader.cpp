// Binds a validated checkpoint to ModelWeights: every tensor by name with its shape derived from
// config.json (jamba-spec.md §2.1), per-expert or fused v5 expert names (§2.2), tied embeddings, the
// HybridLens extensions (trace-format.md §1). Memory budget checked before binding. Not the file checks: io/.
#include "engine/model/loader.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/core/error.h"
#include "engine/core/sys_memory.h"
#include "engine/model/mixer_ops.h"
#include "engine/model/quantize.h"
#include "engine/model/stage_load.h"
#include "engine/model/weight_binder.h"

namespace hl {
namespace {

std::string format_bytes(uint64_t b) {
  char buf[64];
  if (b >= (uint64_t{1} << 30))
    std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(b) / (1 << 30));
  else if (b >= (uint64_t{1} << 20))
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(b) / (1 << 20));
  else if (b >= 1024)
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(b) / 1024);
  else
    std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(b));
  return buf;
}

// Bytes of the float copies that binding makes (norms, biases, conv, A, D, registers, mean row):
// known from the config alone, so the budget check can run before anything is allocated.
uint64_t widened_bytes(const JambaConfig& c, const LayerSchedule& sched) {
  const uint64_t H = c.hidden_size;
  uint64_t floats = H /* final norm */ + H /* mean embedding */ + c.num_register_tokens * H;
  for (const LayerSpec& l : sched.layers())
    floats += H * ((mixer_present(l.mixer) ? 1 : 0) + (l.ffn != FfnKind::None ? 1 : 0)) /* the norms */ +
              mixer_ops(l.mixer).widened_floats(c) +
              (l.ffn == FfnKind::Dense && c.mlp_bias ? (l.ffn_params.gated ? 2 : 1) * l.ffn_params.d_ff + H : 0)
              /* MLP biases */ +
              (l.is_moe() && l.ffn_params.sigmoid_router
                   ? l.ffn_params.experts + (c.mlp_bias ? l.ffn_params.shared_d_ff + l.ffn_params.latent + 2 * H : 0)
                   : 0) /* the correction bias, the shared expert's and latent projections' biases */;
  return floats * sizeof(float);
}

// Gate and up of one MLP stored fused as [gate rows; up rows] (I each, of H columns), from row
// `first` of gu: the v5 fused experts (E, 2I, H) and Granite's shared_mlp (2I, H).
void gate_up_views(WeightBinder& b, const TensorInfo& gu, int64_t first, int64_t I, int64_t H, const std::string& q,
                   MlpWeights& x) {
  x.gate = b.view(gu, first * H, I, H, q + "gate_proj.weight");     // (I, H)
  x.up = b.view(gu, (first + I) * H, I, H, q + "up_proj.weight");   // (I, H)
}

void bind_moe(WeightBinder& b, const JambaConfig& c, const std::string& p, MoeWeights& w) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, E = c.num_experts;
  w.router = b.mat(p + "router.weight", E, H);  // (E, H)
  w.experts.resize(static_cast<size_t>(E));
  if (b.has(p + "experts.gate_up_proj") || b.has(p + "experts.down_proj")) {
    // transformers v5 fused layout: gate_up (E, 2I, H) rows [0,I) gate, [I,2I) up; down (E, H, I).
    const TensorInfo& gu = b.need(p + "experts.gate_up_proj", {E, 2 * I, H});
    const TensorInfo& dn = b.need(p + "experts.down_proj", {E, H, I});
    for (int64_t e = 0; e < E; ++e) {
      std::string q = p + "experts." + std::to_string(e) + ".";
      MlpWeights& x = w.experts[static_cast<size_t>(e)];
      gate_up_views(b, gu, e * 2 * I, I, H, q, x);
      x.down = b.view(dn, e * H * I, H, I, q + "down_proj.weight");        // (H, I)
    }
    return;
  }
  for (int64_t e = 0; e < E; ++e) {
    std::string q = p + "experts." + std::to_string(e) + ".";
    MlpWeights& x = w.experts[static_cast<size_t>(e)];
    x.gate = b.mat(q + "gate_proj.weight", I, H);
    x.up = b.mat(q + "up_proj.weight", I, H);
    x.down = b.mat(q + "down_proj.weight", H, I);
  }
}

// Nemotron-H's MoE (HF NemotronHMoE over DeepSeek-V3's): the router `gate` (E, H) with its
// e_score_correction_bias (E,) (absent: zeros, as HF initialises it); relu² experts up (I, Hin) and
// down (Hin, I) per expert as NVIDIA publishes them, or stacked (E, I, Hin) / (E, Hin, I) as HF's state
// dict holds them, Hin the latent size when fc1_latent_proj (Lat, H) / fc2_latent_proj (H, Lat) exist;
// the shared relu² expert `shared_experts`. Biases of the shared expert and the latent projections
// follow mlp_bias.
void bind_sigmoid_moe(WeightBinder& b, const JambaConfig& c, const FfnParams& f, const std::string& p, MoeWeights& w) {
  const int64_t H = c.hidden_size, I = f.d_ff, E = f.experts, Lat = f.latent, Hin = Lat > 0 ? Lat : H;
  w.router = b.mat(p + "gate.weight", E, H);  // (E, H)
  w.router_bias = b.opt_vec(p + "gate.e_score_correction_bias", {E});
  if (Lat > 0) {
    w.latent_in = b.mat(p + "fc1_latent_proj.weight", Lat, H);
    w.latent_out = b.mat(p + "fc2_latent_proj.weight", H, Lat);
    w.latent_in_bias = b.flagged_vec(c.mlp_bias, "mlp_bias", p + "fc1_latent_proj.bias", {Lat});
    w.latent_out_bias = b.flagged_vec(c.mlp_bias, "mlp_bias", p + "fc2_latent_proj.bias", {H});
  } else {
    for (const char* t : {"fc1_latent_proj.weight", "fc2_latent_proj.weight"})
      b.forbid(p + t, "config.json has no moe_latent_size");
  }
  w.experts.resize(static_cast<size_t>(E));
  const bool stacked = b.has(p + "experts.up_proj") || b.has(p + "experts.down_proj");
  const TensorInfo* up = stacked ? &b.need(p + "experts.up_proj", {E, I, Hin}) : nullptr;
  const TensorInfo* dn = stacked ? &b.need(p + "experts.down_proj", {E, Hin, I}) : nullptr;
  for (int64_t e = 0; e < E; ++e) {
    const std::string q = p + "experts." + std::to_string(e) + ".";
    MlpWeights& x = w.experts[static_cast<size_t>(e)];
    x.up = stacked ? b.view(*up, e * I * Hin, I, Hin, q + "up_proj.weight") : b.mat(q + "up_proj.weight", I, Hin);
    x.down = stacked ? b.view(*dn, e * Hin * I, Hin, I, q + "down_proj.weight") : b.mat(q + "down_proj.weight", Hin, I);
  }
  const int64_t Is = f.shared_d_ff;
  const std::string s = p + "shared_experts.";
  w.shared.up = b.mat(s + "up_proj.weight", Is, H);
  w.shared.down = b.mat(s + "down_proj.weight", H, Is);
  w.shared.up_bias = b.flagged_vec(c.mlp_bias, "mlp_bias", s + "up_proj.bias", {Is});
  w.shared.down_bias = b.flagged_vec(c.mlp_bias, "mlp_bias", s + "down_proj.bias", {H});
}

// A SwiGLU MLP stored fused (Granite's shared_mlp): gate_up (2I, H) rows [0, I) gate, [I, 2I) up; down (H, I).
void bind_fused_mlp(WeightBinder& b, const std::string& p, int64_t I, int64_t H, MlpWeights& w) {
  gate_up_views(b, b.need(p + "gate_up_proj", {2 * I, H}), 0, I, H, p, w);
  w.down = b.mat(p + "down_proj", H, I);  // (H, I)
}

// The mean row of the embedding (test-time registers), accumulated in float64.
std::vector<float> mean_row(const Mat& m) {
  std::vector<double> acc(static_cast<size_t>(m.cols), 0.0);
  std::vector<float> row(static_cast<size_t>(m.cols));
  std::vector<uint8_t> tmp;
  for (int64_t r = 0; r < m.rows; ++r) {
    to_float(m.dtype, plain_rows(m, r, 1, tmp), row.data(), row.size());
    for (size_t j = 0; j < row.size(); ++j) acc[j] += row[j];
  }
  std::vector<float> out(acc.size());
  for (size_t j = 0; j < acc.size(); ++j) out[j] = m.rows > 0 ? static_cast<float>(acc[j] / m.rows) : 0.0f;
  return out;
}

// bind_model, or with `stage` a pipeline stage's binding: every tensor checked, the embedding's mean
// row (test-time registers, fed by stage 0 only) computed only where the stage keeps the embedding.
std::shared_ptr<Model> bind(const Checkpoint& ck, const LoadOptions& opts, const LayerRange* stage);

}  // namespace

std::shared_ptr<Model> bind_model(const Checkpoint& ck, const LoadOptions& opts) {
  return bind(ck, opts, nullptr);
}

std::shared_ptr<Model> bind_model_stage(const Checkpoint& ck, const LoadOptions& opts, LayerRange range) {
  return bind(ck, opts, &range);
}

namespace {

std::shared_ptr<Model> bind(const Checkpoint& ck, const LoadOptions& opts, const LayerRange* stage) {
  const JambaConfig& c = ck.config();
  auto model = std::make_shared<Model>();
  Model& m = *model;
  m.dir = ck.dir();
  m.name = base_name(ck.dir());
  m.config_sha256 = ck.config_sha256();
  m.tokenizer_path = ck.tokenizer_path();
  m.config = c;
  m.schedule = LayerSchedule::from_config(c);

  // Resource estimate before the first allocation (reliability-checklist.md). Quantising on load,
  // the tensors are mapped, not resident, and the check of the quantised sizes follows the binding.
  const uint64_t tensors = ck.total_tensor_bytes(), widened = widened_bytes(c, m.schedule);
  const AvailableMemory avail = opts.memory_budget_bytes ? AvailableMemory{} : available_memory();
  const uint64_t budget = opts.memory_budget_bytes ? opts.memory_budget_bytes : avail.bytes;
  auto check_budget = [&](uint64_t matrices, const std::string& what) {
    if (matrices + widened > budget)
      throw LoadError(m.name + ": the model needs " + format_bytes(matrices + widened) + " (" + format_bytes(matrices) + " of " +
                      what + " + " + format_bytes(widened) + " of widened vectors), more than the memory budget of " +
                      format_bytes(budget) + (opts.memory_budget_bytes ? " (--memory-budget)" : " (" + avail.source + ")"));
  };
  if (!opts.weights) check_budget(tensors, "tensors");
  ck.read_data();  // FileAccess::Read: the weights arrive only now, after the budget check
  m.files = ck.stamps();
  for (const auto& map : ck.mappings()) m.keep_alive.push_back(map);
  if (auto owned = ck.owned_data()) m.keep_alive.push_back(owned);

  WeightBinder b(ck, opts.scan_values, m);
  const int64_t H = c.hidden_size, V = c.vocab_size;
  const int64_t I = c.intermediate_size;
  ModelWeights& w = m.w;
  w.embed = b.mat("model.embed_tokens.weight", V, H);  // (V, H)
  if (c.tie_word_embeddings) {
    b.optional("lm_head.weight", {V, H});  // HF ties it to the embedding anyway
    w.lm_head = w.embed;
  } else {
    if (!b.has("lm_head.weight")) {
      throw LoadError(m.name + ": missing tensor 'lm_head.weight' with shape " + shape_to_string({V, H}) +
                      " (config.json has tie_word_embeddings: false)");
    }
    w.lm_head = b.mat("lm_head.weight", V, H);
  }
  w.final_norm = b.vec("model.final_layernorm.weight", {H});
  const int64_t R = c.num_register_tokens;
  if (R > 0)
    w.register_rows = b.vec("model.register_tokens", {R, H});  // (R, H)
  else
    b.forbid("model.register_tokens", "config.json has no num_register_tokens (or 0)");

  const int64_t L = c.num_hidden_layers;
  w.layers.resize(static_cast<size_t>(L));
  for (int64_t i = 0; i < L; ++i) {
    if (opts.progress.callback && !opts.progress.callback(i, L, "binding layer " + std::to_string(i)))
      throw Cancelled();
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights& lw = w.layers[static_cast<size_t>(i)];
    const LayerSpec& spec = m.schedule[i];
    // A layer binds the norm of each part it has (Nemotron-H: one part, one "norm", tensor_names.h).
    if (mixer_present(spec.mixer)) lw.input_norm = b.vec(p + "input_layernorm.weight", {H});
    if (spec.ffn != FfnKind::None) lw.pre_ff_norm = b.vec(p + "pre_ff_layernorm.weight", {H});
    mixer_ops(spec.mixer).bind(b, c, p, lw);  // the kind's own file (model/mixer_<kind>.cpp)
    if (spec.is_moe() && spec.ffn_params.sigmoid_router) {
      bind_sigmoid_moe(b, c, spec.ffn_params, p + "feed_forward.", lw.moe);
    } else if (spec.is_moe()) {
      bind_moe(b, c, p + "feed_forward.", lw.moe);
      if (spec.ffn_params.shared_d_ff > 0)
        bind_fused_mlp(b, p + "feed_forward.shared.", spec.ffn_params.shared_d_ff, H, lw.moe.shared);
    } else if (spec.ffn == FfnKind::Dense && c.family == Family::GraniteH) {  // the shared MLP alone
      bind_fused_mlp(b, p + "feed_forward.shared.", spec.ffn_params.d_ff, H, lw.mlp);
    } else if (spec.ffn == FfnKind::Dense) {
      if (spec.ffn_params.gated) lw.mlp.gate = b.mat(p + "feed_forward.gate_proj.weight", I, H);  // (I, H)
      lw.mlp.up = b.mat(p + "feed_forward.up_proj.weight", I, H);      // (I, H)
      lw.mlp.down = b.mat(p + "feed_forward.down_proj.weight", H, I);  // (H, I)
      if (spec.ffn_params.gated)
        lw.mlp.gate_bias = b.flagged_vec(c.mlp_bias, "mlp_bias", p + "feed_forward.gate_proj.bias", {I});
      lw.mlp.up_bias = b.flagged_vec(c.mlp_bias, "mlp_bias", p + "feed_forward.up_proj.bias", {I});
      lw.mlp.down_bias = b.flagged_vec(c.mlp_bias, "mlp_bias", p + "feed_forward.down_proj.bias", {H});
    }
  }
  b.check_all_used();
  if (!stage || stage->begin == 0) w.mean_embedding = mean_row(w.embed);  // (H,)
  if (opts.weights) {
    const WeightQuantization plan = plan_quantization(m, *opts.weights, opts.quantize_head);
    check_budget(static_cast<uint64_t>(plan.bytes_after), std::string("matrices as ") + dtype_name(*opts.weights));
    if (opts.progress.callback && !opts.progress.callback(L, L, std::string("quantising to ") + dtype_name(*opts.weights)))
      throw Cancelled();
    QuantizeHooks hooks;
    hooks.progress = opts.progress.callback;
    // A matrix's pages of a mapped safetensors file are dropped once it is quantised or copied (they
    // are clean file pages: touching them again would re-read the file). Other sources are left alone.
    const std::vector<std::shared_ptr<const MappedFile>> maps = ck.mappings();
    hooks.release = [&maps](const void* p, size_t n) {
      const auto* b = static_cast<const uint8_t*>(p);
      for (const auto& map : maps) {
        if (!map || b < map->data() || b + n > map->data() + map->size()) continue;
        const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
        const uintptr_t lo = (reinterpret_cast<uintptr_t>(b) + page - 1) / page * page;
        const uintptr_t hi = (reinterpret_cast<uintptr_t>(b) + n) / page * page;
        if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
      }
    };
    quantize_model(m, *opts.weights, true, hooks, opts.quantize_head);
    // Every matrix is in owned memory now: the model no longer reads the checkpoint's mappings.
    // (a GGUF file's widened buffer, owned_data(), included).
    std::vector<const void*> gone{ck.owned_data().get()};
    for (const auto& map : ck.mappings()) gone.push_back(map.get());
    std::erase_if(m.keep_alive, [&](const std::shared_ptr<const void>& p) {
      return std::find(gone.begin(), gone.end(), p.get()) != gone.end();
    });
  }
  interleave_rows16(m);  // a GGUF file's Q4_K and Q8_0 matrices, as quantise on load lays out its own
  if (opts.fp32_activations) keep_fp32_activations(m);
  if (opts.progress.callback && !opts.progress.callback(L, L, "bound")) throw Cancelled();
  return model;
}

}  // namespace

std::shared_ptr<Model> load_model(const std::string& dir, const LoadOptions& opts) {
  // Read, not Map: a run must not depend on the file after load (MappedFile::open_read). Quantising
  // on load maps the files instead (only the quantised copies become resident) and lets the mapping
  // go afterwards, so the run does not depend on the files either.
  auto ck = std::make_shared<Checkpoint>(Checkpoint::open(dir, opts.progress, opts.weights ? FileAccess::Map : FileAccess::Read));
  std::shared_ptr<Model> m = bind_model(*ck, opts);
  if (!opts.weights) m->keep_alive.push_back(ck);
  return m;
}

}  // namespace hl
