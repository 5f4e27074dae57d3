// `hybridlens trace` (trace-format.md §3): loads a checkpoint, feeds the tokens one at a time
// through a backend, optionally generates greedily, and writes the trace file (safetensors).
// Not the trace layout itself: engine/trace/trace_file.h stacks the per-token records.
#include <chrono>
#include <cstdio>
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
#include "engine/model/sampling.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/trace/trace_file.h"

namespace hl::cli {
namespace {

ArgParser traceParser() {
  ArgParser p("trace",
              "--checkpoint DIR|FILE.gguf (--ids 1,2,3 | --prompt TEXT [--no-bos] | --chat FILE.json) [--generate N [--ignore-eos]]\n"
              "       [--normalizer softmax|softmax1|sink] [--registers N] [--adapter DIR]\n"
              "       [--backend auto|cpu|vulkan|cuda] [--weights as-stored|q8_0|q4_k|q6_k|...] [--full]\n"
              "       [--memory-budget SIZE] [--max-context N] [--pipeline]\n"
              "       --out FILE.safetensors",
              "Runs the model on the tokens, one at a time, and writes every per-token instrument to a\n"
              "safetensors trace file (tensors and metadata as in trace-format.md section 3).");
  addInputOptions(p, "append up to N greedy tokens (stops after an EOS)");
  addModelOptions(p);
  addLimitOptions(p);
  addPipelineOption(p);
  p.flag("full", "also write attn_rows, ssm_delta and ssm_retained (large)")
      .option("out", "FILE", "trace file to write (.safetensors)", true);
  return p;
}

int traceRun(const ParsedArgs& a, const RunOptions& opts, const LoadOptions& loadOptions, int64_t generate,
             const std::string& backendName, const std::string& out, PipelineRun& pipe);

}  // namespace

int runTrace(const std::vector<std::string>& args) {
  ArgParser p = traceParser();
  ParsedArgs a = p.parse(args);
  if (a.helpRequested()) {
    std::fputs(p.usage().c_str(), stdout);
    return 0;
  }

  // Everything that can be checked without the model, before loading it.
  checkInputOptions(a);
  const int64_t generate = a.getIntOr("generate", 0, 0, kMaxGenerate);
  RunOptions opts;
  opts.full = a.has("full");
  applyToggleOptions(a, &opts);
  LoadOptions loadOptions;
  applyLimitOptions(a, &opts, &loadOptions);
  const std::string backendName = backendOption(a);
  const std::string out = a.get("out");
  checkOutputPath(out);
  PipelineRun pipe(a, backendName);
  return pipe.guard("trace", [&] { return traceRun(a, opts, loadOptions, generate, backendName, out, pipe); });
}

namespace {

int traceRun(const ParsedArgs& a, const RunOptions& opts, const LoadOptions& loadOptions, int64_t generate,
             const std::string& backendName, const std::string& out, PipelineRun& pipe) {
  std::shared_ptr<Model> model = pipe.on() ? pipe.loadStage(a, loadOptions) : loadModelOptions(a, loadOptions);
  std::unique_ptr<Tokenizer> tok;
  if ((a.has("prompt") || a.has("chat")) && !model->tokenizer_path.empty())
    tok = Tokenizer::load(model->tokenizer_path);
  const std::vector<int32_t> prompt = inputTokens(a, *model, tok.get());
  // Feed the tokens one at a time (a decode step each), then extend greedily.
  std::vector<TokenTrace> records;
  int64_t generated = 0;
  auto feed = [&](std::unique_ptr<Backend>& backend) {
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
      require_finite_logits(records.back(), model->config.num_hidden_layers);  // never sample from NaN
      const int32_t next = argmax(logits.data(), model->config.vocab_size);
      backend->forward(&next, 1, &records);
      if (!a.has("ignore-eos") && model->config.is_eos(next)) {
        ++generated;
        break;
      }
    }
  };
  const auto t0 = std::chrono::steady_clock::now();
  // A GPU backend that fails mid-run (device lost): with `auto`, the run is redone on the CPU.
  const std::unique_ptr<Backend> backend = pipe.run("trace", backendName, model, feed);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  model->check_files();  // the run's end: the trace names the checkpoint its weights came from
  if (pipe.on()) pipe.gatherPeakMemory();
  if (!pipe.writer()) return 0;  // rank 0 writes the merged records

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
  std::printf("wrote %s: %zu tokens (%zu fed, %lld generated), backend %s%s, %.2f ms/token%s\n", out.c_str(),
              records.size(), prompt.size(), static_cast<long long>(generated), backend->name().c_str(),
              pipe.on() ? (", " + pipe.describe()).c_str() : "",
              records.empty() ? 0.0 : 1e3 * seconds / static_cast<double>(records.size()),
              firstBad < 0 ? ""
                           : (", non-finite values from token " + std::to_string(firstBad) + " at " +
                              nonfinite_where(badLayer, model->config.num_hidden_layers))
                                 .c_str());
  return 0;
}

}  // namespace

}  // namespace hl::cli
