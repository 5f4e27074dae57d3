// `trace --pipeline` and `record --pipeline` (issue 21 item 3, resources/docs/cluster.md): the
// model's layers split over the ranks of mpirun / srun, each rank loading and running only its
// stage's weights (engine/backend/pipeline.h), the records merged on rank 0, which alone writes
// the output. What the commands share: the option, its refusals, MPI set-up and the one place
// where a rank's failure ends the whole job. Not the transport (sweep_mpi.h) nor the stage
// (the CPU or Vulkan backend, by the registry's make_stage).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "app/cli/args.h"
#include "app/cli/sweep_mpi.h"
#include "engine/backend/backend.h"
#include "engine/backend/pipeline.h"

namespace hl::cli {

// --pipeline.
void addPipelineOption(ArgParser& p);

class PipelineRun {
 public:
  // With --pipeline: refuses (UsageError, one line) what is not supported yet — a backend that
  // runs no stage (stage_backend_choices) — then initialises MPI when started by
  // mpirun / srun (without them, as `sweep`: one rank, saying so on stderr). Without --pipeline:
  // off (every call below then does what one process does).
  PipelineRun(const ParsedArgs& a, const std::string& backendName);
  // The same on the ranks of `comm`, where MPI is already set up (`sweep`); with --stages N (which
  // must divide the ranks), pipelines of N consecutive ranks, the prompts spread over them.
  PipelineRun(const ParsedArgs& a, const std::string& backendName, const SweepComm& comm);
  bool on() const { return on_; }
  // The pipelines (`sweep`): member g is pipeline g, whose first stage is its member in gathers;
  // every rank of pipeline g has rank g here. One pipeline without --stages.
  const SweepComm& pipelines() const { return pipelines_; }
  // Rank 0 (or no pipeline): the rank that writes the output and prints.
  bool writer() const { return comm_.rank == 0; }
  int ranks() const { return comm_.size; }
  // Splits --checkpoint over the ranks (split_checkpoint: more ranks than layers is an Error) and
  // loads this rank's stage, with --adapter merged and quantised as --weights says.
  std::shared_ptr<Model> loadStage(const ParsedArgs& a, const LoadOptions& o);
  // With a pipeline: this rank's stage backend over MPI (make_stage_backend) given to `body`; without
  // one, runWithFallback (run_args.h). Returns the backend unless `body` moved it out.
  std::unique_ptr<Backend> run(const std::string& command, const std::string& backendName,
                               const std::shared_ptr<const Model>& model,
                               const std::function<void(std::unique_ptr<Backend>&)>& body);
  // With a pipeline (after loadStage): the link to the other stages and every stage's layers, for
  // what follows a run in step on every stage (sweep --hidden-attention); null / empty without one.
  StageLink* link() const { return on_ ? link_.get() : nullptr; }
  const std::vector<LayerRange>& ranges() const { return ranges_; }
  // Collective (every rank calls it after its run): each rank's peak resident memory (VmHWM of
  // /proc/self/status) gathered on rank 0 for describe().
  void gatherPeakMemory();
  // For rank 0's output line: "pipeline of 2 ranks, layers 0-3 | 4-7, peak memory per rank 120 | 96 MiB"
  // ("3 pipelines of 2 ranks, …" with --stages: the first pipeline's memory).
  std::string describe() const;
  // Runs `body`; without a pipeline, just that. With one, an exception on this rank prints
  // "hybridlens COMMAND: rank R of N: MESSAGE" and ends the whole job (MPI_Abort), so no rank waits
  // for it forever; after `body`, MPI_Finalize.
  int guard(const std::string& command, const std::function<int()>& body);

 private:
  bool on_ = false;
  SweepComm comm_;       // this rank's pipeline: its stages
  SweepComm pipelines_;  // the pipelines
  std::unique_ptr<StageLink> link_;
  std::vector<LayerRange> ranges_;
  std::vector<int64_t> peak_kib_;  // (ranks,) on rank 0 after gatherPeakMemory
};

}  // namespace hl::cli
