// `trace` / `record --pipeline` (pipeline_run.h).
#include "app/cli/pipeline_run.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "app/cli/run_args.h"
#include "engine/backend/pipeline.h"
#include "engine/core/error.h"
#include "engine/model/stage_load.h"

namespace hl::cli {

void addPipelineOption(ArgParser& p) {
  p.flag("pipeline",
         "under mpirun / srun: split the layers over the ranks (balanced by weight bytes), each rank loading only "
         "its stage's weights; rank 0 writes the output (backends: " + stage_backend_choices() +
             "; see resources/docs/cluster.md)");
}

namespace {

// What --pipeline does not support yet: one UsageError line, before any rank loads anything.
void refuseUnsupported(const std::string& backendName) {
  if (const std::string why = stage_backend_refusal(backendName); !why.empty()) throw UsageError(why);
}

void noteWithoutLauncher() {
  const bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") || std::getenv("PMI_RANK");
  if (!launched)  // as `sweep` without a launcher: one rank
    std::fprintf(stderr, "hybridlens: --pipeline without mpirun or srun: one stage, in this process\n");
}

}  // namespace

PipelineRun::PipelineRun(const ParsedArgs& a, const std::string& backendName) {
  if (!a.has("pipeline")) return;
  refuseUnsupported(backendName);
  noteWithoutLauncher();
  comm_ = sweepCommInit();
  on_ = true;
  link_ = mpiStageLink(comm_);
}

PipelineRun::PipelineRun(const ParsedArgs& a, const std::string& backendName, const SweepComm& comm) {
  const bool stages = a.has("stages");
  if (!a.has("pipeline")) {
    if (stages) throw UsageError("--stages applies to --pipeline only");
    return;
  }
  refuseUnsupported(backendName);
  noteWithoutLauncher();
  // --stages N: pipelines of N consecutive ranks; their first stages spread the prompts.
  const int n = stages ? static_cast<int>(a.getIntOr("stages", comm.size, 1, 1 << 20)) : comm.size;
  if (comm.size % n != 0)
    throw UsageError("--stages " + std::to_string(n) + " does not divide the " + std::to_string(comm.size) +
                     " ranks into pipelines of that many stages");
  const int g = comm.rank / n;
  comm_ = SweepComm{comm.rank % n, n, comm.mpi, g * n, 1};
  pipelines_ = SweepComm{g, comm.size / n, comm.mpi, 0, n};
  on_ = true;
  link_ = mpiStageLink(comm_);
}

std::shared_ptr<Model> PipelineRun::loadStage(const ParsedArgs& a, const LoadOptions& given) {
  const std::string dir = a.get("checkpoint");
  LoadOptions o = given;  // --adapter, --weights: each stage merges and quantises its own matrices (stage_load.h)
  o.weights = weightsOption(a, &o.quantize_head, &o.fp32_activations);
  ranges_ = split_checkpoint(dir, comm_.size);
  return load_stage(dir, o, ranges_[static_cast<size_t>(comm_.rank)], a.getOr("adapter", ""));
}

std::unique_ptr<Backend> PipelineRun::run(const std::string& command, const std::string& backendName,
                                          const std::shared_ptr<const Model>& model,
                                          const std::function<void(std::unique_ptr<Backend>&)>& body) {
  if (!on_) return runWithFallback(command, backendName, model, body);
  std::unique_ptr<Backend> b = make_stage_backend(backendName, model, link_.get(), ranges_);
  body(b);
  return b;
}

namespace {

// VmHWM of /proc/self/status in KiB (0 where it cannot be read).
int64_t peakResidentKib() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::atoll(line.c_str() + 6);
  return 0;
}

}  // namespace

void PipelineRun::gatherPeakMemory() {
  const int64_t mine = peakResidentKib();
  std::vector<uint8_t> bytes(sizeof mine);
  std::memcpy(bytes.data(), &mine, sizeof mine);
  peak_kib_.clear();
  for (const std::vector<uint8_t>& b : sweepGather(comm_, bytes)) {
    int64_t v = 0;
    if (b.size() == sizeof v) std::memcpy(&v, b.data(), sizeof v);
    peak_kib_.push_back(v);
  }
}

std::string PipelineRun::describe() const {
  std::string s = (pipelines_.size > 1 ? std::to_string(pipelines_.size) + " pipelines" : std::string("pipeline")) +
                  " of " + std::to_string(comm_.size) + " ranks, layers";
  for (size_t r = 0; r < ranges_.size(); ++r)
    s += (r ? " | " : " ") + std::to_string(ranges_[r].begin) + "-" + std::to_string(ranges_[r].end - 1);
  if (!peak_kib_.empty()) {
    s += ", peak memory per rank";
    for (size_t r = 0; r < peak_kib_.size(); ++r)
      s += (r ? " | " : " ") + std::to_string((peak_kib_[r] + 512) / 1024);
    s += " MiB";
  }
  return s;
}

int PipelineRun::guard(const std::string& command, const std::function<int()>& body) {
  if (!on_ || !comm_.mpi) return body();  // one process: its errors end it as any command's
  int rc = 0;
  try {
    rc = body();
  } catch (const std::exception& e) {
    // The other ranks would wait for this one at its next message: one rank failing ends the job.
    std::fprintf(stderr, "hybridlens %s: rank %d of %d: %s\n", command.c_str(), comm_.rank, comm_.size, e.what());
    std::fflush(stderr);
    sweepAbort(comm_, dynamic_cast<const UsageError*>(&e) ? 2 : 1);
  }
  link_.reset();
  sweepFinalize(comm_);
  return rc;
}

}  // namespace hl::cli
