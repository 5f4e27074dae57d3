// `hybridlens info --checkpoint DIR|FILE.gguf [--json]` (trace-format.md §4): the layer ribbon (attention /
// Mamba, dense / MoE per layer, Lieber et al. 2024), parameter counts (total and active per token),
// tensor dtypes, memory needed, tokenizer, extensions and ignored config fields. Runs no model.
#include <algorithm>
#include <cinttypes>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app/cli/args.h"
#include "app/cli/commands.h"
#include "engine/backend/backend_registry.h"
#include "engine/core/error.h"
#include "engine/core/sys_memory.h"
#include "engine/io/checkpoint.h"
#include "engine/io/gguf_import.h"
#include "engine/model/loader.h"
#include "engine/model/quantize.h"
#include "engine/probes/memory.h"
#include "engine/tokenizer/tokenizer.h"

namespace hl::cli {
namespace {

// The context length at which `info` quotes the memory a run needs.
constexpr int64_t kQuoteContext = 4096;
// The CPU reference keeps the KV cache and the Mamba state in fp32.
constexpr int64_t kStateBytesPerElement = 4;

std::string humanCount(int64_t n) {
  char buf[64];
  if (n >= 1000000000)
    std::snprintf(buf, sizeof buf, "%.2f B", n / 1e9);
  else if (n >= 1000000)
    std::snprintf(buf, sizeof buf, "%.2f M", n / 1e6);
  else if (n >= 1000)
    std::snprintf(buf, sizeof buf, "%.2f K", n / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%" PRId64, n);
  return buf;
}

std::string humanBytes(int64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%" PRId64 " B", n);
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

std::string lower_name(DType t) {
  std::string s = dtype_name(t);
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// Everything `info` reports, in the --json layout.
nlohmann::json collect(const std::string& dir, std::optional<DType> weights, bool head) {
  Checkpoint ckpt = Checkpoint::open(dir);
  // Bound without the memory check: info describes a model that does not fit too (and says so below).
  LoadOptions unbounded;
  unbounded.memory_budget_bytes = UINT64_MAX;
  std::shared_ptr<Model> model = bind_model(ckpt, unbounded);
  const JambaConfig& c = model->config;
  const LayerSchedule& sched = model->schedule;
  const int64_t L = sched.size();

  nlohmann::json j;
  j["checkpoint"] = ckpt.dir();
  j["name"] = model->name;
  j["family"] = family_name(c.family);
  j["config_sha256"] = ckpt.config_sha256();
  j["files"] = ckpt.files();

  // Layer ribbon: one entry per layer, plus a compact strip (A/M mixer, over D/E feed-forward).
  nlohmann::json layers = nlohmann::json::array();
  std::vector<int64_t> sinkLayers;
  for (int64_t i = 0; i < L; ++i) {
    nlohmann::json l = {{"index", i}, {"mixer", mixer_name(sched[i].mixer)}, {"ffn", ffn_name(sched[i].ffn)}};
    if (sched[i].has_attention() && i < static_cast<int64_t>(model->w.layers.size()) &&
        !model->w.layers[i].attn.sinks.empty()) {
      l["sinks"] = true;
      sinkLayers.push_back(i);
    }
    layers.push_back(l);
  }
  j["num_layers"] = L;
  j["num_attention_layers"] = sched.num_attention();
  j["num_mamba_layers"] = sched.num_ssm();
  j["num_moe_layers"] = sched.num_moe();
  j["num_dense_layers"] = sched.num_dense();
  j["schedule"] = sched.describe();
  j["layers"] = layers;
  j["ribbon"] = {{"mixer", sched.mixer_strip()}, {"ffn", sched.ffn_strip()}};
  j["shape"] = {{"vocab_size", c.vocab_size},
                {"hidden_size", c.hidden_size},
                {"intermediate_size", c.intermediate_size},
                {"num_attention_heads", c.num_attention_heads},
                {"num_key_value_heads", c.num_key_value_heads},
                {"head_dim", c.head_dim()},
                {"num_experts", c.num_experts},
                {"num_experts_per_tok", c.num_experts_per_tok},
                {"mamba_d_state", c.mamba_d_state},
                {"mamba_d_conv", c.mamba_d_conv},
                {"mamba_inner", c.mamba_inner()},
                {"tie_word_embeddings", c.tie_word_embeddings}};
  if (c.family == Family::Jamba) {
    j["shape"]["mamba_dt_rank"] = c.mamba_dt_rank;
  } else {
    j["shape"]["mamba_n_heads"] = c.mamba_n_heads;
    j["shape"]["mamba_d_head"] = c.mamba_d_head;
    j["shape"]["mamba_n_groups"] = c.mamba_n_groups;
    j["shape"]["time_step_limit"] = {c.time_step_limit_min, std::isinf(c.time_step_limit_max)
                                                                ? nlohmann::json("Infinity")
                                                                : nlohmann::json(c.time_step_limit_max)};
    j["shape"]["rotary_dim"] = c.rotary_dim();
    j["shape"]["rope_theta"] = c.rope_theta;
    j["shape"]["mamba_norm_group"] = c.mamba2_norm_group();
  }
  if (c.family == Family::GraniteH) {  // µP multipliers and the shared expert
    j["shape"]["embedding_multiplier"] = c.embedding_multiplier;
    j["shape"]["residual_multiplier"] = c.residual_multiplier;
    j["shape"]["attention_multiplier"] = c.attention_scale();
    j["shape"]["logits_scaling"] = c.logits_scaling;
    j["shape"]["shared_intermediate_size"] = c.shared_intermediate_size;
  }
  if (c.family == Family::FalconH1) {  // µP multipliers and the SSM's optional gated norm
    auto& f = j["shape"];
    f["mamba_rms_norm"] = c.mamba_rms_norm;
    f["mamba_norm_before_gate"] = c.mamba_norm_before_gate;
    f["embedding_multiplier"] = c.embedding_multiplier;
    f["lm_head_multiplier"] = c.lm_head_multiplier;
    f["key_multiplier"] = c.key_multiplier;
    f["attention_in_multiplier"] = c.attention_in_multiplier;
    f["attention_out_multiplier"] = c.attention_out_multiplier;
    f["ssm_in_multiplier"] = c.ssm_in_multiplier;
    f["ssm_out_multiplier"] = c.ssm_out_multiplier;
    f["ssm_multipliers"] = c.ssm_multipliers;
    f["mlp_multipliers"] = {c.mlp_gate_multiplier, c.mlp_down_multiplier};
  }
  if (c.family == Family::NemotronH) {
    j["shape"]["layer_pattern"] = c.layer_pattern;  // hybrid_override_pattern: M, *, -
    j["shape"]["mlp_hidden_act"] = c.mlp_hidden_act;
    j["shape"]["time_step_min"] = c.mamba2_dt_lo();  // the Δ floor of HF's torch path
    if (model->schedule.num_moe() > 0) {               // the E layers' DeepSeek-V3 router
      auto& r = j["shape"]["moe"];
      r["router"] = "sigmoid";
      r["n_group"] = c.moe_n_group;
      r["topk_group"] = c.moe_topk_group;
      r["norm_topk_prob"] = c.moe_renormalize;
      r["routed_scaling_factor"] = c.moe_routed_scaling;
      r["moe_intermediate_size"] = model->schedule[model->schedule.moe_layers()[0]].ffn_params.d_ff;
      r["shared_intermediate_size"] = c.shared_intermediate_size;
      r["moe_latent_size"] = c.moe_latent_size;
    }
  }

  j["params"] = model->param_count();
  j["active_params"] = model->active_param_count();

  std::map<std::string, int64_t> dtypeCount;
  std::map<std::string, int64_t> dtypeBytes;
  int64_t tensors = 0;
  for (const TensorInfo* t : ckpt.all_tensors()) {
    ++tensors;
    ++dtypeCount[dtype_name(t->dtype)];
    dtypeBytes[dtype_name(t->dtype)] += static_cast<int64_t>(t->nbytes());
  }
  j["tensor_count"] = tensors;
  if (const GgufImport* g = ckpt.gguf()) {  // what the file stores
    std::map<std::string, int64_t> types, typeBytes;
    uint64_t fileBytes = 0;
    for (const GgufTensor* t : g->files->all_tensors()) {
      ++types[ggml_type_name(t->type)];
      typeBytes[ggml_type_name(t->type)] += static_cast<int64_t>(t->nbytes);
      fileBytes += t->nbytes;
    }
    j["gguf"] = {{"architecture", g->architecture}, {"version", g->files->first().version()},
                 {"files", ckpt.files()},        {"types", types},
                 {"type_bytes", typeBytes},      {"tensor_bytes", fileBytes},
                 {"matrices_held_as", "stored"}, {"vectors_widened_to", "F32"}};
  }
  j["dtypes"] = dtypeCount;
  j["dtype_bytes"] = dtypeBytes;

  // The matrices' bytes in each --weights format (model/quantize.h: the planned sizes, nothing read).
  const int64_t vectorBytes = static_cast<int64_t>(ckpt.total_tensor_bytes()) - [&] {
    int64_t mats = 0;
    for (const MatQuant& q : plan_quantization(*model, DType::Q8_0).mats) mats += q.bytes_before;
    return mats;
  }();
  const AvailableMemory avail = available_memory();
  nlohmann::json formats = nlohmann::json::object();
  for (DType f : {DType::Q8_0, DType::Q6_K, DType::Q4_K}) {
    const WeightQuantization q = plan_quantization(*model, f);
    formats[lower_name(f)] = {{"matrix_bytes", q.bytes_after}, {"weight_bytes", vectorBytes + q.bytes_after},
                              {"quantized", q.quantized_count()}, {"matrices", static_cast<int64_t>(q.mats.size())},
                              {"fits", static_cast<uint64_t>(vectorBytes + q.bytes_after) <= avail.bytes}};
  }
  j["weights_by_format"] = formats;
  // Memory: the weights as they will be held, plus the state a run holds (trace-format.md §3 formulas in fp32).
  int64_t weightBytes = static_cast<int64_t>(ckpt.total_tensor_bytes());
  if (weights) {
    const WeightQuantization q = plan_quantization(*model, *weights, head);
    nlohmann::json kept = nlohmann::json::array();
    for (const MatQuant& m : q.mats)
      if (!m.kept.empty()) kept.push_back({{"name", m.name}, {"why", m.kept}});
    j["weights"] = {{"format", weight_format_name(*weights, head)}, {"matrix_bytes_before", q.bytes_before},
                    {"matrix_bytes_after", q.bytes_after}, {"quantized", q.quantized_count()}, {"kept", kept}};
    weightBytes = vectorBytes + q.bytes_after;
  }
  const int64_t kvPerToken = kv_cache_bytes(c, sched.num_attention(), 1, kStateBytesPerElement);
  const int64_t stateBytes = state_bytes(c, sched, kStateBytesPerElement);
  const int64_t quoteContext = std::min<int64_t>(kQuoteContext, c.max_position_embeddings);
  j["memory"] = {{"weight_bytes", weightBytes}, {"available_bytes", avail.bytes}, {"available_source", avail.source},
                 {"fits", static_cast<uint64_t>(weightBytes) <= avail.bytes}, {"kv_bytes_per_token", kvPerToken},
                 {"state_bytes", stateBytes},   {"state_dtype", "F32"},
                 {"context", quoteContext},     {"total_bytes", weightBytes + stateBytes + kvPerToken * quoteContext}};

  // Tokenizer: present or not, and whether it opens.
  nlohmann::json tok = {{"present", !ckpt.tokenizer_path().empty()}};
  if (!ckpt.tokenizer_path().empty()) {
    tok["path"] = ckpt.tokenizer_path();
    try {
      auto t = Tokenizer::load(ckpt.tokenizer_path());
      tok["vocab_size"] = t->vocab_size();
      tok["kind"] = t->kind();
    } catch (const Error& e) {
      tok["error"] = e.what();
    }
  }
  j["tokenizer"] = tok;

  const int64_t trainedRegisterRows =
      c.hidden_size > 0 ? static_cast<int64_t>(model->w.register_rows.size()) / c.hidden_size : 0;
  j["extensions"] = {{"attention_normalizer", normalizer_name(c.attention_normalizer)},
                     {"sink_layers", sinkLayers},
                     {"num_register_tokens", c.num_register_tokens},
                     {"register_token_rows", trainedRegisterRows}};
  j["ignored_fields"] = c.ignored_fields;
  j["bos_token_id"] = c.bos_token_id;
  j["eos_token_ids"] = c.eos_token_ids;
  nlohmann::json backends = nlohmann::json::array();
  for (const BackendEntry& b : backend_registry())
    backends.push_back({{"name", b.name},
                        {"available", b.available(false)},
                        {"emulated", backend_is_emulated(b.name)},
                        {"device", b.describe()}});
  j["backends"] = backends;
  return j;
}

std::string joinInts(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s;
}

void printText(const nlohmann::json& j) {
  auto I = [](const nlohmann::json& v) { return v.get<int64_t>(); };
  const auto& sh = j["shape"];
  std::printf("checkpoint  %s\n", j["checkpoint"].get<std::string>().c_str());
  std::printf("config      sha256 %s\n", j["config_sha256"].get<std::string>().c_str());
  std::printf("family      %s\n", j["family"].get<std::string>().c_str());
  std::printf("shape       hidden %" PRId64 ", vocab %" PRId64 ", heads %" PRId64 " (kv %" PRId64 ", dim %" PRId64
              "), experts %" PRId64 " (top-%" PRId64 "), Mamba inner %" PRId64 " state %" PRId64 " conv %" PRId64,
              I(sh["hidden_size"]), I(sh["vocab_size"]), I(sh["num_attention_heads"]), I(sh["num_key_value_heads"]),
              I(sh["head_dim"]), I(sh["num_experts"]), I(sh["num_experts_per_tok"]), I(sh["mamba_inner"]),
              I(sh["mamba_d_state"]), I(sh["mamba_d_conv"]));
  if (sh.contains("mamba_dt_rank")) {
    std::printf(" dt rank %" PRId64, I(sh["mamba_dt_rank"]));
  } else {  // Mamba-2
    const auto& lim = sh["time_step_limit"];
    const double lo = sh.contains("time_step_min") ? sh["time_step_min"].get<double>() : lim[0].get<double>();
    std::printf(", %" PRId64 " heads of %" PRId64 " in %" PRId64 " groups, dt clamp [%g, %s], RoPE on %" PRId64
                " dims (theta %g)",
                I(sh["mamba_n_heads"]), I(sh["mamba_d_head"]), I(sh["mamba_n_groups"]), lo,
                lim[1].is_string() ? "Infinity" : std::to_string(lim[1].get<double>()).c_str(), I(sh["rotary_dim"]),
                sh["rope_theta"].get<double>());
  }
  std::printf("%s\n", sh["tie_word_embeddings"].get<bool>() ? ", tied embeddings" : "");
  std::printf("layers      %" PRId64 ": %" PRId64 " attention, %" PRId64 " Mamba; %" PRId64 " MoE, %" PRId64 " dense\n",
              I(j["num_layers"]), I(j["num_attention_layers"]), I(j["num_mamba_layers"]), I(j["num_moe_layers"]),
              I(j["num_dense_layers"]));
  if (sh.contains("ssm_multipliers")) {  // Falcon-H1
    const auto& sm = sh["ssm_multipliers"];
    std::printf("multipliers embedding %g, LM head %g, keys %g, attention in %g / out %g, SSM in %g / out %g,\n"
                "            in_proj z %g x %g B %g C %g dt %g, MLP gate %g / down %g; gated norm %s\n",
                sh["embedding_multiplier"].get<double>(), sh["lm_head_multiplier"].get<double>(),
                sh["key_multiplier"].get<double>(), sh["attention_in_multiplier"].get<double>(),
                sh["attention_out_multiplier"].get<double>(), sh["ssm_in_multiplier"].get<double>(),
                sh["ssm_out_multiplier"].get<double>(), sm[0].get<double>(), sm[1].get<double>(), sm[2].get<double>(),
                sm[3].get<double>(), sm[4].get<double>(), sh["mlp_multipliers"][0].get<double>(),
                sh["mlp_multipliers"][1].get<double>(),
                !sh["mamba_rms_norm"].get<bool>()        ? "none"
                : sh["mamba_norm_before_gate"].get<bool>() ? "before the gate"
                                                           : "after the gate");
  }
  if (sh.contains("residual_multiplier"))
    std::printf("multipliers embedding %g, residual %g, attention scale %g, logits / %g; shared expert %" PRId64 "\n",
                sh["embedding_multiplier"].get<double>(), sh["residual_multiplier"].get<double>(),
                sh["attention_multiplier"].get<double>(), sh["logits_scaling"].get<double>(),
                I(sh["shared_intermediate_size"]));
  if (sh.contains("layer_pattern"))
    std::printf("pattern     %s  (M Mamba-2, * attention, - %s MLP, E MoE)\n", sh["layer_pattern"].get<std::string>().c_str(),
                sh["mlp_hidden_act"].get<std::string>().c_str());
  if (sh.contains("moe")) {
    const auto& r = sh["moe"];
    std::printf("MoE         sigmoid router, top-%" PRId64 " within %" PRId64 " of %" PRId64 " groups, weights %s x %g; "
                "experts %" PRId64 " wide%s, shared expert %" PRId64 "\n",
                I(sh["num_experts_per_tok"]), I(r["topk_group"]), I(r["n_group"]),
                r["norm_topk_prob"].get<bool>() ? "renormalised" : "as scored", r["routed_scaling_factor"].get<double>(),
                I(r["moe_intermediate_size"]),
                I(r["moe_latent_size"]) > 0 ? (" in a latent of " + std::to_string(I(r["moe_latent_size"]))).c_str() : "",
                I(r["shared_intermediate_size"]));
  }
  std::printf("schedule    %s\n", j["schedule"].get<std::string>().c_str());
  std::printf("ribbon      mixer %s  (A attention, M Mamba-1, S Mamba-2, P attention ∥ Mamba-2, - none)\n", j["ribbon"]["mixer"].get<std::string>().c_str());
  std::printf("            ffn   %s  (E MoE, D dense, - none)\n", j["ribbon"]["ffn"].get<std::string>().c_str());
  for (const auto& l : j["layers"]) {
    std::printf("  layer %3" PRId64 "  %-9s  %s%s\n", I(l["index"]), l["mixer"].get<std::string>().c_str(),
                l["ffn"].get<std::string>().c_str(), l.contains("sinks") ? "  sinks" : "");
  }
  std::printf("parameters  %s total (%" PRId64 "), %s active per token (%" PRId64 ")\n",
              humanCount(I(j["params"])).c_str(), I(j["params"]), humanCount(I(j["active_params"])).c_str(),
              I(j["active_params"]));
  std::string dt;
  for (const auto& [name, n] : j["dtypes"].items())
    dt += (dt.empty() ? "" : ", ") + name + " " + std::to_string(n.get<int64_t>());
  std::printf("tensors     %" PRId64 " (%s)\n", I(j["tensor_count"]), dt.c_str());
  if (j.contains("gguf")) {
    const auto& g = j["gguf"];
    std::string types;
    for (const auto& [name, n] : g["types"].items())
      types += (types.empty() ? "" : ", ") + name + " " + std::to_string(n.get<int64_t>());
    std::printf("gguf        %s, v%d, %zu file%s; %s in the file (%s); matrices held as stored, vectors widened to F32\n",
                g["architecture"].get<std::string>().c_str(), g["version"].get<int>(), g["files"].size(),
                g["files"].size() == 1 ? "" : "s", humanBytes(I(g["tensor_bytes"])).c_str(), types.c_str());
  }
  const auto& m = j["memory"];
  const std::string held = j.contains("weights") ? "with --weights " + j["weights"]["format"].get<std::string>()
                           : "as held in memory";
  std::printf("memory      weights %s %s; KV cache %s per token, Mamba state %s (fp32)\n",
              humanBytes(I(m["weight_bytes"])).c_str(), held.c_str(), humanBytes(I(m["kv_bytes_per_token"])).c_str(),
              humanBytes(I(m["state_bytes"])).c_str());
  std::string byFormat;
  for (const auto& [name, f] : j["weights_by_format"].items())
    byFormat += (byFormat.empty() ? "" : ", ") + name + " " + humanBytes(I(f["weight_bytes"])) + " (" +
                std::to_string(I(f["quantized"])) + "/" + std::to_string(I(f["matrices"])) + " matrices quantised" +
                (f["fits"].get<bool>() ? "" : ", does not fit") + ")";
  std::printf("            weights with --weights: %s\n", byFormat.c_str());
  std::printf("            available: %s (%s)%s\n", humanBytes(I(m["available_bytes"])).c_str(),
              m["available_source"].get<std::string>().c_str(), m["fits"].get<bool>() ? "" : "; the weights do not fit");
  if (j.contains("weights")) {
    const auto& w = j["weights"];
    std::printf("            --weights %s: %" PRId64 " matrices quantised, %zu kept as stored\n",
                w["format"].get<std::string>().c_str(), I(w["quantized"]), w["kept"].size());
  }
  std::printf("            needed for a %" PRId64 "-token context: %s\n", I(m["context"]),
              humanBytes(I(m["total_bytes"])).c_str());
  const auto& tok = j["tokenizer"];
  if (!tok["present"].get<bool>())
    std::printf("tokenizer   none (token ids are used directly)\n");
  else if (tok.contains("error"))
    std::printf("tokenizer   %s, unreadable: %s\n", tok["path"].get<std::string>().c_str(), tok["error"].get<std::string>().c_str());
  else
    std::printf("tokenizer   %s (%" PRId64 " pieces)\n", tok["kind"].get<std::string>().c_str(), I(tok["vocab_size"]));
  const auto& ext = j["extensions"];
  const auto sinks = ext["sink_layers"].get<std::vector<int64_t>>();
  std::printf("extensions  normalizer %s; sinks %s; registers %" PRId64 " (%" PRId64 " trained rows)\n",
              ext["attention_normalizer"].get<std::string>().c_str(),
              sinks.empty() ? "none" : ("in layers " + joinInts(sinks)).c_str(), I(ext["num_register_tokens"]),
              I(ext["register_token_rows"]));
  std::string ignored;
  for (const auto& f : j["ignored_fields"]) ignored += (ignored.empty() ? "" : ", ") + f.get<std::string>();
  std::printf("ignored     %s\n", ignored.empty() ? "none" : ignored.c_str());
  for (const auto& b : j["backends"])
    std::printf("backend     %-7s %s: %s\n", b["name"].get<std::string>().c_str(),
                b["available"].get<bool>() ? "available" : "unavailable", b["device"].get<std::string>().c_str());
}

}  // namespace

int runInfo(const std::vector<std::string>& args) {
  ArgParser p("info", "--checkpoint DIR|FILE.gguf [--weights FORMAT] [--json]",
              "Describes a Jamba or Bamba checkpoint without running it: the layer ribbon, parameter counts, tensor\n"
              "dtypes, memory needed, tokenizer, extensions and the config fields HybridLens ignores.");
  p.option("checkpoint", "DIR", "checkpoint folder (config.json + safetensors) or a GGUF file", true)
      .option("weights", "FORMAT",
              "count the memory as quantised on load: " + weight_format_choices() + ", each optionally +head")
      .flag("json", "print one JSON object instead of text");
  ParsedArgs a = p.parse(args);
  if (a.helpRequested()) {
    std::fputs(p.usage().c_str(), stdout);
    return 0;
  }
  std::optional<DType> weights;
  bool head = false;
  try {
    if (a.has("weights")) weights = parse_weight_format(a.get("weights"), "--weights", &head);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  const nlohmann::json info = collect(a.get("checkpoint"), weights, head);
  if (a.has("json"))
    std::printf("%s\n", info.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  else
    printText(info);
  return 0;
}

}  // namespace hl::cli
