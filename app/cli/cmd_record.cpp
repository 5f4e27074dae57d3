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
#include "app/cli/pipeline_run.h"
#include "app/cli/run_args.h"
#include "engine/backend/backend.h"
#include "engine/core/error.h"
#include "engine/model/loader.h"
#include "engine/tokenizer/tokenizer.h"
#include "sessions/identity.h"
#include "sessions/recorder.h"
#include "sessions/session_file.h"

namespace hl::cli {
namespace {

static_assert(kMaxRegisters == kSessionMaxRegisters, "--registers and the session format agree");

ArgParser recordParser() {
  ArgParser p("record",
              "--checkpoint DIR|FILE.gguf (--ids 1,2,3 | --prompt TEXT [--no-bos] | --chat FILE.json) [--generate N [--ignore-eos]]\n"
              "       [--temperature T [--top-p P] [--seed S]] [--normalizer softmax|softmax1|sink]\n"
              "       [--registers N] [--adapter DIR] [--backend auto|cpu|vulkan|cuda]\n"
              "       [--weights as-stored|q8_0|q4_k|q6_k|...] [--memory-budget SIZE] [--max-context N]\n"
              "       [--compare-normalizer NAME | --compare-registers N] [--no-full]\n"
              "       [--logits-dtype f32|f16|bf16] [--full-dtype f16|bf16|f32] [--pipeline] --out FILE.hlsession",
              "Runs the model on the tokens, one at a time, and writes a session file: settings, checkpoint\n"
              "identity, tokens and every per-token record (attention rows and per-channel delta included).\n"
              "--compare-normalizer / --compare-registers add a run B over the same tokens with that toggle\n"
              "changed (see `hybridlens compare`).");
  addInputOptions(p, "append up to N generated tokens (stops after an EOS)");
  addSamplingOptions(p);
  addModelOptions(p);
  addLimitOptions(p);
  addPipelineOption(p);
  p.option("compare-normalizer", "NAME", "also record run B with this normalizer over the same tokens")
      .option("compare-registers", "N", "also record run B with N registers over the same tokens")
      .flag("no-full", "leave out attn_rows, ssm_delta and ssm_retained (much smaller files)")
      .option("logits-dtype", "T", "storage of the logits: f32 (default, exact), f16 or bf16")
      .option("full-dtype", "T", "storage of attn_rows, ssm_delta, ssm_retained: f16 (default), bf16 or f32")
      .option("out", "FILE", "session file to write (.hlsession)", true);
  return p;
}

DType dtypeOption(const ParsedArgs& a, const std::string& name, DType fallback) {
  if (!a.has(name)) return fallback;
  const std::string v = a.get(name);
  if (v == "f32") return DType::F32;
  if (v == "f16") return DType::F16;
  if (v == "bf16") return DType::BF16;
  throw UsageError("--" + name + ": expected f32, f16 or bf16, got '" + v + "'");
}

int recordRun(const ParsedArgs& a, const RunOptions& opts, const RunOptions& optsB, bool hasB,
              const LoadOptions& loadOptions, const SessionSaveOptions& save, const SamplingOptions& sampling,
              int64_t generate, const std::string& backendName, const std::string& out, PipelineRun& pipe);

}  // namespace

int runRecord(const std::vector<std::string>& args) {
  ArgParser p = recordParser();
  ParsedArgs a = p.parse(args);
  if (a.helpRequested()) {
    std::fputs(p.usage().c_str(), stdout);
    return 0;
  }
  // Everything that can be checked without the model, before loading it.
  checkInputOptions(a);
  const SamplingOptions sampling = samplingOptions(a);
  if (a.has("compare-normalizer") && a.has("compare-registers")) {
    throw UsageError("--compare-normalizer and --compare-registers exclude each other (one toggle per B run)");
  }
  const int64_t generate = a.getIntOr("generate", 0, 0, kMaxGenerate);
  RunOptions opts;
  opts.full = !a.has("no-full");
  applyToggleOptions(a, &opts);
  LoadOptions loadOptions;
  applyLimitOptions(a, &opts, &loadOptions);
  RunOptions optsB = opts;
  const bool hasB = a.has("compare-normalizer") || a.has("compare-registers");
  if (a.has("compare-normalizer")) {
    optsB.normalizer_override = true;
    optsB.normalizer = normalizerOption(a, "compare-normalizer");
  }
  if (a.has("compare-registers")) {
    optsB.registers = static_cast<int>(a.getInt("compare-registers", 0, kSessionMaxRegisters));
  }
  SessionSaveOptions save;
  save.logits_dtype = dtypeOption(a, "logits-dtype", DType::F32);
  save.full_dtype = dtypeOption(a, "full-dtype", DType::F16);
  const std::string backendName = backendOption(a);
  const std::string out = a.get("out");
  checkOutputPath(out);
  PipelineRun pipe(a, backendName);
  return pipe.guard("record", [&] {
    return recordRun(a, opts, optsB, hasB, loadOptions, save, sampling, generate, backendName, out, pipe);
  });
}

namespace {

int recordRun(const ParsedArgs& a, const RunOptions& opts, const RunOptions& optsB, bool hasB,
              const LoadOptions& loadOptions, const SessionSaveOptions& save, const SamplingOptions& sampling,
              int64_t generate, const std::string& backendName, const std::string& out, PipelineRun& pipe) {
  const std::string dir = a.get("checkpoint");
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<Model> model = pipe.on() ? pipe.loadStage(a, loadOptions) : loadModelOptions(a, loadOptions);
  const double loadSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // The session's checkpoint identity: only the rank that writes it reads the files for it.
  const CheckpointIdentity identity = pipe.writer() ? identify_checkpoint(dir) : CheckpointIdentity{};
  model->check_files();  // the identity read the files the weights came from
  std::unique_ptr<Tokenizer> tok;
  if (!model->tokenizer_path.empty()) tok = Tokenizer::load(model->tokenizer_path);
  std::string promptText;
  const std::vector<int32_t> prompt = inputTokens(a, *model, tok.get(), &promptText);

  // With `auto`, a GPU backend lost mid-run is replaced by the CPU and the run redone (as `trace`).
  Run runA;
  int64_t generated = 0;
  pipe.run("record", backendName, model, [&](std::unique_ptr<Backend>& b) {
    Recorder recA(std::move(b), opts, sampling, "A");
    recA.feed(prompt);
    generated = generate > 0 ? recA.generate(generate) : 0;
    runA = recA.take_run();
  });
  runA.load_seconds = loadSeconds;
  std::vector<int32_t> tokens;
  for (const TokenTrace& r : runA.records) tokens.push_back(r.token_id);

  Recording rec =
      make_recording(*model, identity, promptText, tokens, tok.get());
  rec.runs.push_back(std::move(runA));
  if (hasB) {
    // B on the backend that finished A (the CPU after a fallback), so A and B compare alike.
    const bool aOnCpu = rec.runs[0].settings.backend == "cpu";
    pipe.run("record", backendName == "auto" && aOnCpu ? "cpu" : backendName, model,
                    [&](std::unique_ptr<Backend>& b) {
                      Recorder recB(std::move(b), optsB, sampling, "B");
                      recB.feed(tokens);
                      rec.runs.push_back(recB.take_run());
                    });
  }
  model->check_files();  // at the end of the runs too: a session never pairs an identity with other weights
  if (pipe.on()) pipe.gatherPeakMemory();
  if (!pipe.writer()) return 0;  // rank 0 writes the merged records
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
  std::printf("wrote %s: %.2f MB, %zu tokens (%zu fed, %lld generated), backend %s%s, runs %s\n", out.c_str(), mb,
              tokens.size(), prompt.size(), static_cast<long long>(generated), rec.runs[0].settings.backend.c_str(),
              pipe.on() ? (", " + pipe.describe()).c_str() : "", runs.c_str());
  return 0;
}

}  // namespace

}  // namespace hl::cli
