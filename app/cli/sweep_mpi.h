// The MPI side of `hybridlens sweep` (stats-format.md) and of `trace` / `record --pipeline`
// (cluster.md): the only code that includes <mpi.h>.
// MPI is initialised only when the process was started by mpirun or srun (their environment
// variables), so a plain `hybridlens` never calls MPI_Init; without HL_HAVE_MPI (no MPI found at
// configure time) a launch by mpirun with more than one rank is refused.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hl {
class StageLink;
}

namespace hl::cli {

// A set of ranks: member r (0 <= r < size) is world rank base + r·stride; this process is member
// `rank`. The world is {rank, size, 0, 1}; `sweep --pipeline --stages N` splits it into pipelines
// of N consecutive ranks (a pipeline's stages: base g·N, stride 1) whose first stages spread the
// prompts between them (stride N).
struct SweepComm {
  int rank = 0, size = 1;
  bool mpi = false;  // MPI_Init was called
  int base = 0, stride = 1;
  int world(int member) const { return base + member * stride; }
};

// Rank and size from OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_RANK/PMI_SIZE; {0, 1} without them.
// Calls MPI_Init when launched so. Throws Error when launched with several ranks by a build without MPI.
SweepComm sweepCommInit();
// Every member's bytes on member 0, in member order (member 0's first); the others get nothing.
// Called by every member of `c` (and by no other rank).
std::vector<std::vector<uint8_t>> sweepGather(const SweepComm& c, const std::vector<uint8_t>& mine);
// Every rank of the world (c.mpi) waits for every other.
void sweepBarrier(const SweepComm& c);
// Ends the whole job (MPI_Abort) after a rank failed; without MPI, exits.
[[noreturn]] void sweepAbort(const SweepComm& c, int code);
void sweepFinalize(const SweepComm& c);

// The pipeline's transport (engine/backend/pipeline.h) over MPI_COMM_WORLD: blocking sends and
// receives between the members of `c` (stage r is world rank c.world(r); c.mpi; a one-rank link
// otherwise). Collective over the world (every rank makes its link at the same point). Test hook
// HL_PIPELINE_KILL_AFTER=K[:RANK]: that rank (default every rank) kills itself with SIGKILL at its
// K-th send, as a rank that dies mid-run.
std::unique_ptr<StageLink> mpiStageLink(const SweepComm& c);

}  // namespace hl::cli
