// `hybridlens sweep` (issue 21 item 1, stats-format.md): runs every prompt of a JSONL file as
// `record` runs one, aggregates the per-token instruments into per-layer / per-head / per-expert
// distributions (sessions/sweep_stats.h) and writes one stats file (sessions/sweep_file.h).
// Resumable through progress files next to --out (sweep_progress.h), on any number of ranks; under
// mpirun / srun the prompts are spread over the ranks (app/cli/sweep_mpi.h) and the aggregates merged
// on rank 0 in rank order.
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "app/cli/args.h"
#include "app/cli/commands.h"
#include "app/cli/pipeline_run.h"
#include "app/cli/run_args.h"
#include "app/cli/sweep_mpi.h"
#include "app/cli/sweep_progress.h"
#include "app/cli/sweep_prompts.h"
#include "engine/core/error.h"
#include "engine/io/adapter.h"
#include "engine/tokenizer/tokenizer.h"
#include "sessions/identity.h"
#include "sessions/recorder.h"
#include "sessions/session_file.h"
#include "sessions/sweep_file.h"
#include "sessions/sweep_hidden.h"
#include "sessions/sweep_summary.h"

namespace hl::cli {
namespace {

ArgParser sweepParser() {
  ArgParser p(
      "sweep",
      "--checkpoint DIR|FILE.gguf --prompts FILE.jsonl [--generate N [--ignore-eos]] [--no-bos]\n"
      "       [--temperature T [--top-p P] [--seed S]] [--normalizer softmax|softmax1|sink]\n"
      "       [--registers N] [--adapter DIR] [--backend auto|cpu|vulkan|cuda] [--weights FORMAT]\n"
      "       [--memory-budget SIZE] [--max-context N] [--no-full] [--sketch-accuracy A] --out FILE.hlstats\n"
      "       [--keep-sessions DIR] [--hidden-attention] [--pipeline [--stages N]]",
      "Runs every prompt of a JSON Lines file ({\"text\": ...}, {\"messages\": [...]} or {\"ids\": [...]} a line)\n"
      "one token at a time, as `record` does, and writes the distributions of the instruments over all of\n"
      "them: count, mean, variance, min, max, quantiles and a histogram per head, layer, depth and expert,\n"
      "and the router's top-k counts and balance over the set. FILE.hlstats.partial keeps the progress:\n"
      "the same command run again continues where it stopped. Under `mpirun -np N` (or srun) the prompts\n"
      "are spread over the ranks; the result equals the one-process run.");
  p.option("checkpoint", "DIR", "checkpoint folder, or a GGUF file (any shard of a split)", true)
      .option("prompts", "FILE", "JSON Lines file of prompts (blank lines skipped)", true)
      .flag("no-bos", "for {\"text\"} prompts: do not prepend bos_token_id")
      .option("generate", "N", "after each prompt, up to N generated tokens (stops after an EOS)")
      .flag("ignore-eos", "with --generate: do not stop at an EOS token");
  addSamplingOptions(p);
  addModelOptions(p);
  addLimitOptions(p);
  addPipelineOption(p);
  p.flag("no-full",
         "leave out the attention rows (no attn_first_mass; kept sessions without them): memory O(T) per prompt")
      .option("stages", "N",
              "with --pipeline: pipelines of N ranks each (N must divide the ranks), the prompts spread over them "
              "(default: one pipeline of every rank)")
      .option("sketch-accuracy", "A", "relative accuracy of the quantile sketch, in [0.001, 0.5] (default 0.01)")
      .option("out", "FILE", "stats file to write (.hlstats)", true)
      .option("keep-sessions", "DIR", "also write each prompt's session file (prompt-NNNNNN.hlsession) into DIR")
      .flag("hidden-attention",
            "also aggregate the SSM layers' hidden attention per head (row entropy, first-token share); O(T^2) a prompt");
  return p;
}

// The options that change the statistics, as given: a resumed sweep must have the same.
nlohmann::ordered_json optionsJson(const ParsedArgs& a) {
  nlohmann::ordered_json o = nlohmann::ordered_json::object();
  for (const char* k : {"no-bos", "generate", "ignore-eos", "temperature", "top-p", "seed", "normalizer", "registers",
                        "adapter", "backend", "weights", "max-context", "no-full", "sketch-accuracy",
                        "hidden-attention"})
    if (a.has(k)) o[k] = a.get(k);
  return o;
}

// Test hook HL_SWEEP_KILL_AFTER=K[:RANK]: the process (of that rank, default every rank) kills itself
// with SIGKILL once it has finished and saved K prompts, as an interrupted sweep would stop.
void maybeKillSelf(int finishedHere, int rank) {
  const char* v = std::getenv("HL_SWEEP_KILL_AFTER");
  if (!v || !*v) return;
  const std::string s = v;
  const auto colon = s.find(':');
  const int k = std::atoi(s.substr(0, colon).c_str());
  if (colon != std::string::npos && std::atoi(s.substr(colon + 1).c_str()) != rank) return;
  if (finishedHere >= k) ::kill(::getpid(), SIGKILL);
}

int sweepBody(const std::vector<std::string>& args, const SweepComm& mpi) {
  ArgParser p = sweepParser();
  ParsedArgs a = p.parse(args);
  if (a.helpRequested()) {
    if (mpi.rank == 0) std::fputs(p.usage().c_str(), stdout);
    return 0;
  }
  if (a.has("ignore-eos") && !a.has("generate")) throw UsageError("--ignore-eos applies to --generate only");
  const int64_t generate = a.getIntOr("generate", 0, 0, kMaxGenerate);
  const SamplingOptions sampling = samplingOptions(a);
  RunOptions opts;
  opts.full = !a.has("no-full");  // the first-token mass reads the attention rows
  applyToggleOptions(a, &opts);
  LoadOptions loadOptions;
  applyLimitOptions(a, &opts, &loadOptions);
  SketchParams sp;
  sp.alpha = realOption(a, "sketch-accuracy", 0.01, 0.001, 0.5);
  const std::string backendName = backendOption(a);
  const std::string out = a.get("out");
  checkOutputPath(out);
  // --pipeline: the ranks of a pipeline run each of its prompts through their stages of the model
  // (cluster.md) and its first stage alone keeps the progress; the prompts are spread over the
  // pipelines (one without --stages), as they are over the ranks without --pipeline.
  PipelineRun pipe(a, backendName, mpi);
  const SweepComm comm = pipe.on() ? pipe.pipelines() : mpi;  // what the prompts are spread over
  const bool hidden = a.has("hidden-attention");
  const std::string keep = a.getOr("keep-sessions", "");
  if (a.has("keep-sessions")) {
    struct stat st {};
    if (::stat(keep.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      throw UsageError("--keep-sessions: '" + keep + "' is not a folder");
  }
  std::string promptsSha;
  const std::vector<SweepPrompt> prompts = readPromptsFile(a.get("prompts"), &promptsSha);

  const std::string dir = a.get("checkpoint");
  std::shared_ptr<Model> model = pipe.on() ? pipe.loadStage(a, loadOptions) : loadModelOptions(a, loadOptions);
  const CheckpointIdentity identity = identify_checkpoint(dir);
  model->check_files();
  std::unique_ptr<Tokenizer> tok;
  if (!model->tokenizer_path.empty()) tok = Tokenizer::load(model->tokenizer_path);
  // Every prompt's tokens before the first run: a bad prompt fails at once, naming its line.
  std::vector<std::vector<int32_t>> tokens(prompts.size());
  std::vector<std::string> texts(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const SweepPrompt& q = prompts[i];
    const std::string where = a.get("prompts") + ":" + std::to_string(q.line);
    if (q.kind == SweepPrompt::Kind::Ids) {
      tokens[i] = q.ids;
      checkVocabulary(q.ids, model->config.vocab_size, where);
    } else if (q.kind == SweepPrompt::Kind::Text) {
      tokens[i] = textTokens(*model, tok.get(), q.text, !a.has("no-bos"), where);
      texts[i] = q.text;
    } else {
      if (!tok) throw Error(where + ": chat messages need a tokenizer, but " + model->dir + " has none (use \"ids\")");
      texts[i] = renderChat(q.chat, model->dir, where);
      tokens[i] = chatTokens(*model, tok.get(), texts[i], where);
    }
  }

  const LayerSchedule& sched = model->schedule;
  nlohmann::ordered_json job = nlohmann::ordered_json::object();
  job["checkpoint"] = {{"folder", identity.folder},
                       {"name", identity.name},
                       {"config_sha256", identity.config_sha256},
                       {"weights_hash", identity.weights_hash}};
  job["adapter"] = a.has("adapter") ? adapter_identity(a.get("adapter")) : "";
  job["prompts_file"] = {{"sha256", promptsSha}, {"prompts", prompts.size()}};
  job["options"] = optionsJson(a);
  nlohmann::ordered_json extra = job;
  extra["prompts_path"] = a.get("prompts");
  extra["schedule"] = sweep_schedule_json(sched);
  nlohmann::ordered_json progressExtra = extra;
  progressExtra["ranks"] = comm.size;
  progressExtra["rank"] = comm.rank;

  // The progress: this rank's file to continue, every finished prompt, files of another rank count
  // adopted by rank 0, which saves its own before removing them (sweep_progress.h).
  const std::string partial = sweepProgressPath(out, comm.rank, comm.size);
  SweepProgress progress =
      readSweepProgress(out, comm.rank, comm.size, progressExtra, SweepStats::for_schedule(sched, sp),
                        static_cast<int64_t>(prompts.size()));
  SweepStats& stats = progress.stats;
  std::vector<int64_t>& finished = progress.finished;
  const std::set<int64_t>& done = progress.done;
  if (!progress.note.empty() && pipe.writer()) std::fprintf(stderr, "hybridlens sweep: %s\n", progress.note.c_str());
  sweepBarrier(mpi);  // every rank has read every file
  if (!progress.adopted.empty() && comm.rank == 0 && pipe.writer()) {
    save_sweep_stats(partial, stats, progressExtra, true, &finished);
    for (const std::string& f : progress.adopted) std::remove(f.c_str());
  }
  sweepBarrier(mpi);  // removed before any rank writes its own file, which may bear an adopted name

  int finishedHere = 0;
  for (size_t i = static_cast<size_t>(comm.rank); i < prompts.size(); i += static_cast<size_t>(comm.size)) {
    if (done.count(static_cast<int64_t>(i))) continue;
    Run run;
    pipe.run("sweep", backendName, model, [&](std::unique_ptr<Backend>& b) {
      Recorder rec(std::move(b), opts, sampling, "A");
      rec.feed(tokens[i]);
      if (generate > 0) rec.generate(generate);
      run = rec.take_run();
    });
    model->check_files();
    stats.add_run(run);
    if (hidden) add_hidden_attention(stats, model, opts, run, pipe.link(), pipe.ranges());
    if (!keep.empty() && pipe.writer()) {
      std::vector<int32_t> ids;
      for (const TokenTrace& r : run.records) ids.push_back(r.token_id);
      Recording rec = make_recording(*model, identity, texts[i], ids, tok.get());
      rec.runs.push_back(run);
      char name[40];
      std::snprintf(name, sizeof name, "/prompt-%06zu%s", i, kSessionExtension);
      save_session(keep + name, rec);
    }
    finished.push_back(static_cast<int64_t>(i));
    if (pipe.writer()) save_sweep_stats(partial, stats, progressExtra, true, &finished);
    maybeKillSelf(++finishedHere, mpi.rank);  // the world rank (one stage of a pipeline)
  }

  // Rank 0 merges the ranks' aggregates in rank order and writes the file.
  const std::vector<uint8_t> mine =
      comm.size > 1 && pipe.writer() ? serialize_sweep_stats(stats, progressExtra, true, &finished) : std::vector<uint8_t>{};
  const std::vector<std::vector<uint8_t>> all =
      comm.size > 1 && pipe.writer() ? sweepGather(comm, mine) : std::vector<std::vector<uint8_t>>{};
  if (pipe.on()) pipe.gatherPeakMemory();
  if (comm.rank == 0 && pipe.writer()) {
    SweepStats total = comm.size > 1 ? SweepStats::for_schedule(sched, sp) : stats;
    for (size_t r = 0; r < all.size(); ++r)
      total.merge(parse_sweep_stats(all[r].data(), all[r].size(), "rank " + std::to_string(r)).stats);
    if (total.prompts != static_cast<int64_t>(prompts.size()))
      throw Error("sweep: " + std::to_string(total.prompts) + " of " + std::to_string(prompts.size()) +
                  " prompts aggregated");
    save_sweep_stats(out, total, extra, false);
    const std::string ranks = pipe.on() ? pipe.describe() : std::to_string(comm.size) + (comm.size > 1 ? " ranks" : " rank");
    std::printf("wrote %s: %lld prompts, %lld tokens, %s\n", out.c_str(), static_cast<long long>(total.prompts),
                static_cast<long long>(total.tokens), ranks.c_str());
  }
  sweepBarrier(mpi);  // the file is written: every rank's progress can go
  if (pipe.writer()) std::remove(partial.c_str());
  return 0;
}

}  // namespace

int runSweep(const std::vector<std::string>& args) {
  const SweepComm comm = sweepCommInit();
  if (!comm.mpi) return sweepBody(args, comm);
  int rc = 0;
  try {
    rc = sweepBody(args, comm);
  } catch (const std::exception& e) {
    // One rank failing ends the job: the others would wait for it at the gather.
    std::fprintf(stderr, "hybridlens sweep: rank %d of %d: %s\n", comm.rank, comm.size, e.what());
    std::fflush(stderr);
    sweepAbort(comm, dynamic_cast<const UsageError*>(&e) ? 2 : 1);
  }
  sweepFinalize(comm);
  return rc;
}

}  // namespace hl::cli
