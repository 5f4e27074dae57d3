// `hybridlens record` (trace-format.md §4, issue 6): runs a checkpoint on tokens like `trace`, with
// every instrument including the full attention rows and Δ per channel, and writes a session file;
// optionally a B run with one toggle changed over the same tokens. Not the file layout: sessions/.
#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "app/cli/args.h"
#include "app/cli/commands.h"
#include "engine/backend/backend.h"
#include "engine/core/error.h"
#include "engine/io/adapter.h"
#include "engine/model/loader.h"
#include "engine/tokenizer/tokenizer.h"
#include "sessions/identity.h"
#include "sessions/recorder.h"
#include "sessions/session_file.h"

namespace hl::cli {
namespace {

constexpr int64_t kMaxGenerate = 1 << 20;

ArgParser recordParser() {
  ArgParser p("record",
              "--checkpoint DIR (--ids 1,2,3 | --prompt TEXT [--no-bos]) [--generate N [--ignore-eos]]\n"
              "       [--temperature T [--top-p P] [--seed S]] [--normalizer softmax|softmax1|sink]\n"
              "       [--registers N] [--adapter DIR] [--backend auto|cpu|vulkan|cuda]\n"
              "       [--compare-normalizer NAME | --compare-registers N] [--no-full]\n"
              "       [--logits-dtype f32|f16|bf16] [--full-dtype f16|bf16|f32] --out FILE.hlsession",
              "Runs the model on the tokens, one at a time, and writes a session file: settings, checkpoint\n"
              "identity, tokens and every per-token record (attention rows and per-channel delta included).\n"
              "--compare-normalizer / --compare-registers add a run B over the same tokens with that toggle\n"
              "changed (see `hybridlens compare`).");
  p.option("checkpoint", "DIR", "checkpoint folder", true)
      .option("ids", "LIST", "token ids to feed, comma-separated (e.g. 1,2,3)")
      .option("prompt", "TEXT", "text to tokenize with the checkpoint's tokenizer.model")
      .flag("no-bos", "with --prompt: do not prepend bos_token_id")
      .option("generate", "N", "append up to N generated tokens (stops after an EOS)")
      .flag("ignore-eos", "with --generate: do not stop at an EOS token")
      .option("temperature", "T", "with --generate: sampling temperature (default 0: greedy)")
      .option("top-p", "P", "with --temperature: nucleus sampling mass in (0, 1] (default 1)")
      .option("seed", "S", "with --temperature: random seed (default 0)")
      .option("normalizer", "NAME", "override every attention layer: softmax, softmax1 or sink")
      .option("registers", "N", "use N register tokens (default: the trained count)")
      .option("adapter", "DIR", "PEFT LoRA/DoRA adapter to merge into the base weights")
      .option("backend", "NAME", "auto (default), cpu, vulkan or cuda")
      .option("compare-normalizer", "NAME", "also record run B with this normalizer over the same tokens")
      .option("compare-registers", "N", "also record run B with N registers over the same tokens")
      .flag("no-full", "leave out attn_rows, ssm_delta and ssm_retained (much smaller files)")
      .option("logits-dtype", "T", "storage of the logits: f32 (default, exact), f16 or bf16")
      .option("full-dtype", "T", "storage of attn_rows, ssm_delta, ssm_retained: f16 (default), bf16 or f32")
      .option("out", "FILE", "session file to write (.hlsession)", true);
  return p;
}

bool isDirectory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void checkOutputPath(const std::string& out) {
  if (out.empty()) throw UsageError("--out: empty file name");
  if (isDirectory(out)) throw UsageError("--out: '" + out + "' is a folder, expected a file name");
  const auto slash = out.find_last_of('/');
  const std::string parent = slash == std::string::npos ? "." : (slash == 0 ? "/" : out.substr(0, slash));
  if (!isDirectory(parent)) throw Error("--out: folder '" + parent + "' does not exist");
}

Normalizer normalizerOption(const ParsedArgs& a, const std::string& name) {
  Normalizer n = Normalizer::Softmax;
  if (!parse_normalizer(a.get(name), &n)) {
    throw UsageError("--" + name + ": expected softmax, softmax1 or sink, got '" + a.get(name) + "'");
  }
  return n;
}

DType dtypeOption(const ParsedArgs& a, const std::string& name, DType fallback) {
  if (!a.has(name)) return fallback;
  const std::string v = a.get(name);
  if (v == "f32") return DType::F32;
  if (v == "f16") return DType::F16;
  if (v == "bf16") return DType::BF16;
  throw UsageError("--" + name + ": expected f32, f16 or bf16, got '" + v + "'");
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

// The tokens to feed: --ids as given, or --prompt through tokenizer.model with BOS unless --no-bos.
std::vector<int32_t> inputTokens(const ParsedArgs& a, const Model& model, const Tokenizer* tok) {
  const int64_t V = model.config.vocab_size;
  std::vector<int32_t> ids;
  if (a.has("ids")) {
    try {
      ids = parse_id_list(a.get("ids"));
    } catch (const Error& e) {
      throw UsageError(std::string("--ids: ") + e.what());
    }
    if (ids.empty()) throw UsageError("--ids: no token ids given");
  } else {
    if (!tok) throw Error("--prompt needs a tokenizer, but " + model.dir + " has no tokenizer.model (use --ids)");
    if (!a.has("no-bos") && model.config.bos_token_id >= 0)
      ids.push_back(static_cast<int32_t>(model.config.bos_token_id));
    for (int32_t id : tok->encode(a.get("prompt"))) ids.push_back(id);
    if (ids.empty()) throw Error("--prompt: the text gives no tokens (and --no-bos adds none)");
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= V) {
      throw Error(std::string(a.has("ids") ? "--ids" : "--prompt (tokenizer.model)") + ": token id " +
                  std::to_string(ids[i]) + " at position " + std::to_string(i) + " is outside the vocabulary [0, " +
                  std::to_string(V) + ") of config.json");
    }
  }
  return ids;
}

}  // namespace

int runRecord(const std::vector<std::string>& args) {
  ArgParser p = recordParser();
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
  if ((a.has("top-p") || a.has("seed")) && !a.has("temperature")) {
    throw UsageError("--top-p and --seed apply to sampling: give --temperature too");
  }
  if (a.has("compare-normalizer") && a.has("compare-registers")) {
    throw UsageError("--compare-normalizer and --compare-registers exclude each other (one toggle per B run)");
  }
  const int64_t generate = a.getIntOr("generate", 0, 0, kMaxGenerate);
  RunOptions opts;
  opts.full = !a.has("no-full");
  opts.registers = static_cast<int>(a.getIntOr("registers", -1, 0, kSessionMaxRegisters));
  if (a.has("normalizer")) {
    opts.normalizer_override = true;
    opts.normalizer = normalizerOption(a, "normalizer");
  }
  RunOptions optsB = opts;
  const bool hasB = a.has("compare-normalizer") || a.has("compare-registers");
  if (a.has("compare-normalizer")) {
    optsB.normalizer_override = true;
    optsB.normalizer = normalizerOption(a, "compare-normalizer");
  }
  if (a.has("compare-registers")) {
    optsB.registers = static_cast<int>(a.getInt("compare-registers", 0, kSessionMaxRegisters));
  }
  SamplingOptions sampling;
  sampling.temperature = static_cast<float>(realOption(a, "temperature", 0.0, 0.0, 1e6));
  sampling.top_p = static_cast<float>(realOption(a, "top-p", 1.0, 0.0, 1.0));
  if (a.has("top-p") && !(sampling.top_p > 0.0f)) throw UsageError("--top-p: expected a number in (0, 1]");
  sampling.seed = static_cast<uint64_t>(a.getIntOr("seed", 0, 0, INT64_MAX));
  sampling.ignore_eos = a.has("ignore-eos");
  SessionSaveOptions save;
  save.logits_dtype = dtypeOption(a, "logits-dtype", DType::F32);
  save.full_dtype = dtypeOption(a, "full-dtype", DType::F16);
  const std::string backendName = a.getOr("backend", "auto");
  if (backendName != "auto" && backendName != "cpu" && backendName != "vulkan" && backendName != "cuda") {
    throw UsageError("--backend: expected auto, cpu, vulkan or cuda, got '" + backendName + "'");
  }
  const std::string out = a.get("out");
  checkOutputPath(out);

  const std::string dir = a.get("checkpoint");
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<Model> model = load_model(dir);
  if (a.has("adapter")) merge_adapter(*model, load_adapter(a.get("adapter"), *model));
  const double loadSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const CheckpointIdentity identity = identify_checkpoint(dir);
  std::unique_ptr<Tokenizer> tok;
  if (!model->tokenizer_path.empty()) tok = Tokenizer::load(model->tokenizer_path);
  const std::vector<int32_t> prompt = inputTokens(a, *model, tok.get());

  Recorder recA(make_backend(backendName, model), opts, sampling, "A");
  recA.feed(prompt);
  const int64_t generated = generate > 0 ? recA.generate(generate) : 0;
  Run runA = recA.take_run();
  runA.load_seconds = loadSeconds;
  std::vector<int32_t> tokens;
  for (const TokenTrace& r : runA.records) tokens.push_back(r.token_id);

  Recording rec =
      make_recording(*model, identity, a.has("prompt") ? a.get("prompt") : std::string(), tokens, tok.get());
  rec.runs.push_back(std::move(runA));
  if (hasB) {
    Recorder recB(make_backend(backendName, model), optsB, sampling, "B");
    recB.feed(tokens);
    rec.runs.push_back(recB.take_run());
  }
  save_session(out, rec, save);

  struct stat st {};
  const double mb = ::stat(out.c_str(), &st) == 0 ? static_cast<double>(st.st_size) / 1e6 : 0.0;
  std::string runs;
  for (const Run& r : rec.runs) {
    char ms[32];
    std::snprintf(ms, sizeof ms, "%.2f",
                  r.records.empty() ? 0.0 : 1e3 * r.run_seconds / static_cast<double>(r.records.size()));
    runs += (runs.empty() ? "" : ", ") + r.label + " (normalizer " +
            (r.settings.normalizer_override ? normalizer_name(r.settings.normalizer) : "as-trained") + ", " +
            std::to_string(r.settings.registers_used) + " registers, " + ms + " ms/token)";
  }
  std::printf("wrote %s: %.2f MB, %zu tokens (%zu fed, %lld generated), backend %s, runs %s\n", out.c_str(), mb,
              tokens.size(), prompt.size(), static_cast<long long>(generated), rec.runs[0].settings.backend.c_str(),
              runs.c_str());
  return 0;
}

}  // namespace hl::cli
