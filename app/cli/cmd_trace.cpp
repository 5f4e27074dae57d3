// `hybridlens trace` (trace-format.md §3): loads a checkpoint, feeds the tokens one at a time
// through a backend, optionally generates greedily, and writes the trace file (safetensors).
// Not the trace layout itself: engine/trace/trace_file.h stacks the per-token records.
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "app/cli/args.h"
#include "app/cli/commands.h"
#include "engine/io/adapter.h"
#include "engine/backend/backend.h"
#include "engine/core/error.h"
#include "engine/model/loader.h"
#include "engine/model/sampling.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/trace/trace_file.h"

namespace hl::cli {
namespace {

constexpr int64_t kMaxGenerate = 1 << 20;
constexpr int64_t kMaxRegisters = 1 << 16;
constexpr int64_t kMaxContext = (int64_t{1} << 31) - 1;  // positions are int32

ArgParser traceParser() {
  ArgParser p("trace",
              "--checkpoint DIR (--ids 1,2,3 | --prompt TEXT [--no-bos]) [--generate N [--ignore-eos]]\n"
              "       [--normalizer softmax|softmax1|sink] [--registers N] [--adapter DIR]\n"
              "       [--backend auto|cpu|vulkan|cuda] [--full] [--memory-budget SIZE] [--max-context N]\n"
              "       --out FILE.safetensors",
              "Runs the model on the tokens, one at a time, and writes every per-token instrument to a\n"
              "safetensors trace file (tensors and metadata as in trace-format.md section 3).");
  p.option("checkpoint", "DIR", "checkpoint folder", true)
      .option("ids", "LIST", "token ids to feed, comma-separated (e.g. 1,2,3)")
      .option("prompt", "TEXT", "text to tokenize with the checkpoint's tokenizer.model")
      .flag("no-bos", "with --prompt: do not prepend bos_token_id")
      .option("generate", "N", "append up to N greedy tokens (stops after an EOS)")
      .flag("ignore-eos", "with --generate: do not stop at an EOS token")
      .option("normalizer", "NAME", "override every attention layer: softmax, softmax1 or sink")
      .option("registers", "N", "use N register tokens (default: the trained count)")
      .option("adapter", "DIR", "PEFT LoRA/DoRA adapter folder, merged into the base weights")
      .option("backend", "NAME", "auto (default), cpu, vulkan or cuda")
      .flag("full", "also write attn_rows, ssm_delta and ssm_retained (large)")
      .option("memory-budget", "SIZE", "refuse a model needing more memory (e.g. 8G; default: physical RAM)")
      .option("max-context", "N", "most tokens in the run (default: config.json max_position_embeddings)")
      .option("out", "FILE", "trace file to write (.safetensors)", true);
  return p;
}

bool isDirectory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Fails before the (possibly long) run when the output cannot be written where asked.
void checkOutputPath(const std::string& out) {
  if (out.empty()) throw UsageError("--out: empty file name");
  if (isDirectory(out)) throw UsageError("--out: '" + out + "' is a folder, expected a file name");
  const auto slash = out.find_last_of('/');
  const std::string parent = slash == std::string::npos ? "." : (slash == 0 ? "/" : out.substr(0, slash));
  if (!isDirectory(parent)) throw Error("--out: folder '" + parent + "' does not exist");
}

void checkIds(const std::vector<int32_t>& ids, int64_t vocab, const std::string& what) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      throw Error(what + ": token id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                  " is outside the vocabulary [0, " + std::to_string(vocab) + ") of config.json");
    }
  }
}

// The tokens to feed: --ids as given, or --prompt through tokenizer.model with BOS unless --no-bos.
std::vector<int32_t> inputTokens(const ParsedArgs& a, const Model& model) {
  const JambaConfig& c = model.config;
  std::vector<int32_t> ids;
  if (a.has("ids")) {
    try {
      ids = parse_id_list(a.get("ids"));
    } catch (const Error& e) {
      throw UsageError(std::string("--ids: ") + e.what());
    }
    if (ids.empty()) throw UsageError("--ids: no token ids given");
    checkIds(ids, c.vocab_size, "--ids");
    return ids;
  }
  if (model.tokenizer_path.empty()) {
    throw Error("--prompt needs a tokenizer, but " + model.dir + " has no tokenizer.model (use --ids)");
  }
  auto tok = Tokenizer::load(model.tokenizer_path);
  if (!a.has("no-bos")) ids.push_back(static_cast<int32_t>(c.bos_token_id));
  for (int32_t id : tok->encode(a.get("prompt"))) ids.push_back(id);
  if (ids.empty()) throw Error("--prompt: the text gives no tokens (and --no-bos adds none)");
  checkIds(ids, c.vocab_size, "--prompt (tokenizer.model)");
  return ids;
}

}  // namespace

int runTrace(const std::vector<std::string>& args) {
  ArgParser p = traceParser();
  ParsedArgs a = p.parse(args);
  if (a.helpRequested()) {
    std::fputs(p.usage().c_str(), stdout);
    return 0;
  }

  // Everything that can be checked without the model, before loading it.
  if (a.has("ids") == a.has("prompt")) {
    throw UsageError(a.has("ids") ? "--ids and --prompt exclude each other" : "give the tokens with --ids or --prompt");
  }
  if (a.has("no-bos") && !a.has("prompt")) throw UsageError("--no-bos applies to --prompt only");
  if (a.has("ignore-eos") && !a.has("generate")) throw UsageError("--ignore-eos applies to --generate only");
  const int64_t generate = a.getIntOr("generate", 0, 0, kMaxGenerate);
  RunOptions opts;
  opts.full = a.has("full");
  opts.registers = static_cast<int>(a.getIntOr("registers", -1, 0, kMaxRegisters));
  opts.max_context = a.getIntOr("max-context", 0, 1, kMaxContext);
  LoadOptions loadOptions;
  if (a.has("memory-budget"))
    loadOptions.memory_budget_bytes = parseByteSize(a.get("memory-budget"), "--memory-budget");
  if (a.has("normalizer")) {
    opts.normalizer_override = true;
    if (!parse_normalizer(a.get("normalizer"), &opts.normalizer)) {
      throw UsageError("--normalizer: expected softmax, softmax1 or sink, got '" + a.get("normalizer") + "'");
    }
  }
  const std::string backendName = a.getOr("backend", "auto");
  if (backendName != "auto" && backendName != "cpu" && backendName != "vulkan" && backendName != "cuda") {
    throw UsageError("--backend: expected auto, cpu, vulkan or cuda, got '" + backendName + "'");
  }
  const std::string out = a.get("out");
  checkOutputPath(out);

  std::shared_ptr<Model> model = load_model(a.get("checkpoint"), loadOptions);
  if (a.has("adapter"))
    merge_adapter(*model, load_adapter(a.get("adapter"), *model), loadOptions.memory_budget_bytes);
  const std::vector<int32_t> prompt = inputTokens(a, *model);
  std::string note;  // why `auto` did not take the GPU backend
  std::unique_ptr<Backend> backend = make_backend(backendName, model, &note);
  if (!note.empty()) std::fprintf(stderr, "hybridlens trace: %s\n", note.c_str());

  // Feed the tokens one at a time (a decode step each), then extend greedily.
  std::vector<TokenTrace> records;
  int64_t generated = 0;
  auto feed = [&] {
    backend->start(opts);
    records.clear();
    records.reserve(prompt.size() + static_cast<size_t>(generate));
    for (int32_t id : prompt) backend->forward(&id, 1, &records);
    for (generated = 0; generated < generate; ++generated) {
      const std::vector<float>& logits = records.back().logits;  // (V,)
      if (static_cast<int64_t>(logits.size()) != model->config.vocab_size) {
        throw Error("backend " + backend->name() + " returned " + std::to_string(logits.size()) +
                    " logits, expected vocab_size " + std::to_string(model->config.vocab_size));
      }
      const int32_t next = argmax(logits.data(), model->config.vocab_size);
      backend->forward(&next, 1, &records);
      if (!a.has("ignore-eos") && model->config.is_eos(next)) {
        ++generated;
        break;
      }
    }
  };
  const auto t0 = std::chrono::steady_clock::now();
  try {
    feed();
  } catch (const BackendFailure& e) {
    // A GPU backend that fails mid-run (device lost): with `auto`, the run is redone on the CPU.
    if (backendName != "auto") throw;
    std::fprintf(stderr, "hybridlens trace: %s; falling back to the CPU backend\n", e.what());
    backend = make_backend("cpu", model);
    feed();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  TraceMeta meta;
  meta.checkpoint = model->name;
  meta.config_sha256 = model->config_sha256;
  meta.normalizer = opts.normalizer_override ? normalizer_name(opts.normalizer) : "as-trained";
  meta.registers = std::to_string(backend->registers());
  meta.adapter = model->adapter;
  meta.backend = backend->name();
  write_trace(out, *model, backend->registers(), records, meta);

  int firstBad = -1, badLayer = -1;
  for (const auto& r : records) {
    if (r.nonfinite_layer >= 0) {
      firstBad = r.position;
      badLayer = r.nonfinite_layer;
      break;
    }
  }
  std::printf("wrote %s: %zu tokens (%zu fed, %lld generated), backend %s, %.2f ms/token%s\n", out.c_str(),
              records.size(), prompt.size(), static_cast<long long>(generated), backend->name().c_str(),
              records.empty() ? 0.0 : 1e3 * seconds / static_cast<double>(records.size()),
              firstBad < 0 ? ""
                           : (", non-finite values from token " + std::to_string(firstBad) + " at layer " +
                              std::to_string(badLayer))
                                 .c_str());
  return 0;
}

}  // namespace hl::cli
