// The options shared by `trace` and `record` (see run_args.h): their declarations, checks and the
// token list. Messages name the option and the allowed values, as the rest of the command line.
#include "app/cli/run_args.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>

#include "engine/backend/backend_registry.h"
#include "engine/core/error.h"
#include "engine/io/adapter.h"
#include "engine/model/quantize.h"
#include "engine/tokenizer/chat_template.h"

namespace hl::cli {

void addTokenOptions(ArgParser& p) {
  p.option("checkpoint", "DIR", "checkpoint folder, or a GGUF file (any shard of a split)", true)
      .option("ids", "LIST", "token ids to feed, comma-separated (e.g. 1,2,3)")
      .option("prompt", "TEXT", "text to tokenize with the checkpoint's tokenizer.json or tokenizer.model")
      .option("chat", "FILE", "JSON messages [{role, content}...] rendered with the checkpoint's chat template")
      .flag("no-bos", "with --prompt: do not prepend bos_token_id");
}

void addInputOptions(ArgParser& p, const std::string& generateHelp) {
  addTokenOptions(p);
  p.option("generate", "N", generateHelp)
      .flag("ignore-eos", "with --generate: do not stop at an EOS token");
}

void addModelOptions(ArgParser& p) {
  p.option("normalizer", "NAME", "override every attention layer: softmax, softmax1 or sink")
      .option("registers", "N", "use N register tokens (default: the trained count)")
      .option("adapter", "DIR", "PEFT LoRA/DoRA adapter folder, merged into the base weights")
      .option("backend", "NAME", "auto (default) or one of this build's backends: " + backend_choices().substr(6))
      .option("weights", "FORMAT",
              "quantise the large matrices on load: " + weight_format_choices() +
                  "; +head quantises the LM head too, e.g. q8_0+head (default as-stored). The CPU rounds x to 8 bits "
                  "per block in decode products with Q8_0, Q4_K, Q6_K weights, as llama.cpp; a last "
                  "+fp32-activations keeps it in fp32, e.g. q4_k+fp32-activations");
}

void addSamplingOptions(ArgParser& p) {
  p.option("temperature", "T", "with --generate: sampling temperature (default 0: greedy)")
      .option("top-p", "P", "with --temperature: nucleus sampling mass in (0, 1] (default 1)")
      .option("seed", "S", "with --temperature: random seed (default 0)");
}

double realOption(const ParsedArgs& a, const std::string& name, double fallback, double lo, double hi) {
  if (!a.has(name)) return fallback;
  const std::string v = a.get(name);
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || !(x >= lo && x <= hi)) {
    throw UsageError("--" + name + ": expected a number in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                     "], got '" + v + "'");
  }
  return x;
}

SamplingOptions samplingOptions(const ParsedArgs& a) {
  if ((a.has("top-p") || a.has("seed")) && !a.has("temperature")) {
    throw UsageError("--top-p and --seed apply to sampling: give --temperature too");
  }
  SamplingOptions sampling;
  sampling.temperature = static_cast<float>(realOption(a, "temperature", 0.0, 0.0, 1e6));
  sampling.top_p = static_cast<float>(realOption(a, "top-p", 1.0, 0.0, 1.0));
  if (a.has("top-p") && !(sampling.top_p > 0.0f)) throw UsageError("--top-p: expected a number in (0, 1]");
  sampling.seed = static_cast<uint64_t>(a.getIntOr("seed", 0, 0, INT64_MAX));
  sampling.ignore_eos = a.has("ignore-eos");
  return sampling;
}

void addLimitOptions(ArgParser& p) {
  p.option("memory-budget", "SIZE", "refuse a model needing more memory (e.g. 8G; default: the memory available)")
      .option("max-context", "N", "most tokens in the run (default: config.json max_position_embeddings)");
}

void applyLimitOptions(const ParsedArgs& a, RunOptions* opts, LoadOptions* load) {
  constexpr int64_t kMaxContext = (int64_t{1} << 31) - 1;  // positions are int32
  opts->max_context = a.getIntOr("max-context", 0, 1, kMaxContext);
  if (a.has("memory-budget")) load->memory_budget_bytes = parseByteSize(a.get("memory-budget"), "--memory-budget");
}

void checkInputOptions(const ParsedArgs& a) {
  const int given = static_cast<int>(a.has("ids")) + static_cast<int>(a.has("prompt")) + static_cast<int>(a.has("chat"));
  if (given == 0) throw UsageError("give the tokens with --ids or --prompt (or --chat FILE.json)");
  if (given > 1) throw UsageError("--ids, --prompt and --chat exclude each other");
  if (a.has("no-bos") && !a.has("prompt")) throw UsageError("--no-bos applies to --prompt only");
  if (a.has("ignore-eos") && !a.has("generate")) throw UsageError("--ignore-eos applies to --generate only");
}

void applyToggleOptions(const ParsedArgs& a, RunOptions* opts) {
  opts->registers = static_cast<int>(a.getIntOr("registers", -1, 0, kMaxRegisters));
  if (a.has("normalizer")) {
    opts->normalizer_override = true;
    opts->normalizer = normalizerOption(a, "normalizer");
  }
}

Normalizer normalizerOption(const ParsedArgs& a, const std::string& name) {
  Normalizer n = Normalizer::Softmax;
  if (!parse_normalizer(a.get(name), &n)) {
    throw UsageError("--" + name + ": expected softmax, softmax1 or sink, got '" + a.get(name) + "'");
  }
  return n;
}

std::string backendOption(const ParsedArgs& a) {
  const std::string name = a.getOr("backend", "auto");
  if (name != "auto" && !find_backend(name))
    throw UsageError("--backend: expected " + backend_choices() + " (the backends of this build), got '" + name + "'");
  return name;
}

std::unique_ptr<Backend> runWithFallback(const std::string& command, const std::string& name,
                                         const std::shared_ptr<const Model>& model,
                                         const std::function<void(std::unique_ptr<Backend>&)>& body) {
  std::string note;  // why `auto` did not take the GPU backend at set-up
  std::unique_ptr<Backend> backend = make_backend(name, model, &note);
  if (!note.empty()) std::fprintf(stderr, "hybridlens %s: %s\n", command.c_str(), note.c_str());
  try {
    body(backend);
  } catch (const BackendFailure& e) {
    if (name != "auto") throw;
    std::fprintf(stderr, "hybridlens %s: %s; falling back to the CPU backend\n", command.c_str(), e.what());
    backend = make_backend("cpu", model);
    body(backend);
  }
  return backend;
}

namespace {

bool isDirectory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

void checkOutputPath(const std::string& out) {
  if (out.empty()) throw UsageError("--out: empty file name");
  if (isDirectory(out)) throw UsageError("--out: '" + out + "' is a folder, expected a file name");
  const auto slash = out.find_last_of('/');
  const std::string parent = slash == std::string::npos ? "." : (slash == 0 ? "/" : out.substr(0, slash));
  if (!isDirectory(parent)) throw Error("--out: folder '" + parent + "' does not exist");
}

std::shared_ptr<Model> loadModelOptions(const ParsedArgs& a, const LoadOptions& given) {
  LoadOptions o = given;
  if (a.has("weights")) o.weights = weightsOption(a, &o.quantize_head, &o.fp32_activations);
  if (!a.has("adapter")) return load_model(a.get("checkpoint"), o);
  // An adapter merges into the stored weights; the merged model is then quantised (so the adapter's
  // change is quantised with the matrix, as a deployment would have it).
  const std::optional<DType> format = o.weights;
  o.weights.reset();
  std::shared_ptr<Model> model = load_model(a.get("checkpoint"), o);
  merge_adapter(*model, load_adapter(a.get("adapter"), *model), o.memory_budget_bytes);
  if (format) quantize_model(*model, *format, false, {}, o.quantize_head);
  return model;
}

std::optional<DType> weightsOption(const ParsedArgs& a, bool* head, bool* fp32_activations) {
  if (!a.has("weights")) return std::nullopt;
  try {
    return parse_weight_format(a.get("weights"), "--weights", head, fp32_activations);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

std::string chatText(const ParsedArgs& a, const std::string& checkpointDir) {
  ChatRequest req;
  try {
    req = read_chat_request(a.get("chat"));
  } catch (const LoadError& e) {
    throw Error(std::string("--chat: ") + e.what());
  }
  return renderChat(req, checkpointDir, "--chat");
}

std::string renderChat(const ChatRequest& req, const std::string& checkpointDir, const std::string& what) {
  const std::optional<ChatTemplateSource> tpl = find_chat_template(checkpointDir);
  if (!tpl)
    throw Error(what + ": " + checkpointDir +
                " has no chat template (chat_template in tokenizer_config.json, chat_template.jinja, "
                "chat_template.json, or tokenizer.chat_template in a GGUF file); use --prompt with the text");
  return apply_chat_template(*tpl, req.messages, req.add_generation_prompt);
}

void checkVocabulary(const std::vector<int32_t>& ids, int64_t V, const std::string& what) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= V) {
      throw Error(what + ": token id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                  " is outside the vocabulary [0, " + std::to_string(V) + ") of config.json");
    }
  }
}

std::vector<int32_t> chatTokens(const Model& model, const Tokenizer* tok, const std::string& rendered,
                                const std::string& what) {
  // As apply_chat_template(tokenize=True): the template writes the special tokens (BOS
  // included) itself, so nothing is prepended (add_special_tokens=False).
  std::vector<int32_t> ids = tok->encode(rendered);
  if (ids.empty()) throw Error(what + ": the rendered chat gives no tokens");
  checkVocabulary(ids, model.config.vocab_size, what + " (" + tok->kind() + ")");
  return ids;
}

std::vector<int32_t> textTokens(const Model& model, const Tokenizer* tok, const std::string& text, bool bos,
                                const std::string& what) {
  if (!tok) throw Error(what + " needs a tokenizer, but " + model.dir + " has no tokenizer.json or tokenizer.model (use --ids)");
  std::vector<int32_t> ids = encode_prompt(*tok, text, bos, model.config.bos_token_id);
  if (ids.empty()) throw Error(what + ": the text gives no tokens (and --no-bos adds none)");
  checkVocabulary(ids, model.config.vocab_size, what + " (" + tok->kind() + ")");
  return ids;
}

std::vector<int32_t> inputTokens(const ParsedArgs& a, const Model& model, const Tokenizer* tok, std::string* text) {
  std::vector<int32_t> ids;
  if (a.has("ids")) {
    try {
      ids = parse_id_list(a.get("ids"));
    } catch (const Error& e) {
      throw UsageError(std::string("--ids: ") + e.what());
    }
    if (ids.empty()) throw UsageError("--ids: no token ids given");
    checkVocabulary(ids, model.config.vocab_size, "--ids");
  } else if (a.has("chat")) {
    if (!tok) throw Error("--chat needs a tokenizer, but " + model.dir + " has no tokenizer.json or tokenizer.model (use --ids)");
    const std::string rendered = chatText(a, model.dir);
    ids = chatTokens(model, tok, rendered, "--chat");
    if (text) *text = rendered;
  } else {
    ids = textTokens(model, tok, a.get("prompt"), !a.has("no-bos"), "--prompt");
  }
  return ids;
}

}  // namespace hl::cli
