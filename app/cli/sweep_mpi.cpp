// The MPI side of `hybridlens sweep` (see sweep_mpi.h): MPI_Init on request of the launcher, the
// gather of the ranks' aggregates on rank 0, MPI_Abort. Open MPI's default error handler and its
// runtime end the job when a rank dies, so no call here waits forever on a dead rank.
#include "app/cli/sweep_mpi.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "engine/backend/pipeline.h"
#include "engine/core/error.h"

#ifdef HL_HAVE_MPI
#include <mpi.h>
#endif

namespace hl::cli {

#ifndef HL_HAVE_MPI
namespace {

int envInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

}  // namespace
#endif

SweepComm sweepCommInit() {
  SweepComm c;
  const bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") || std::getenv("PMI_RANK");
  if (!launched) return c;
#ifdef HL_HAVE_MPI
  MPI_Init(nullptr, nullptr);
  MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &c.size);
  c.mpi = true;
#else
  const int size = envInt("OMPI_COMM_WORLD_SIZE", envInt("PMI_SIZE", envInt("SLURM_NTASKS", 1)));
  if (size > 1)
    throw Error("started by mpirun/srun with " + std::to_string(size) +
                " ranks, but this build has no MPI (configure with Open MPI installed: libopenmpi-dev)");
#endif
  return c;
}

std::vector<std::vector<uint8_t>> sweepGather(const SweepComm& c, const std::vector<uint8_t>& mine) {
  std::vector<std::vector<uint8_t>> out;
  if (!c.mpi) {
    out.push_back(mine);
    return out;
  }
#ifdef HL_HAVE_MPI
  // Each member's size, then its bytes, point to point to member 0 (the members may be a subset of
  // the world; no 2 GiB displacement limit of MPI_Gatherv's int offsets over the sum).
  long long n = static_cast<long long>(mine.size());
  constexpr long long kChunk = 1 << 30;
  const int root = c.world(0);
  if (c.rank != 0) {
    MPI_Send(&n, 1, MPI_LONG_LONG, root, 20, MPI_COMM_WORLD);
    for (long long at = 0; at < n; at += kChunk)
      MPI_Send(mine.data() + at, static_cast<int>(std::min(kChunk, n - at)), MPI_BYTE, root, 21, MPI_COMM_WORLD);
    return out;
  }
  out.push_back(mine);
  for (int r = 1; r < c.size; ++r) {
    MPI_Recv(&n, 1, MPI_LONG_LONG, c.world(r), 20, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (n < 0) throw Error("sweep: rank " + std::to_string(c.world(r)) + " announced " + std::to_string(n) + " bytes");
    std::vector<uint8_t> b(static_cast<size_t>(n));
    for (long long at = 0; at < n; at += kChunk)
      MPI_Recv(b.data() + at, static_cast<int>(std::min(kChunk, n - at)), MPI_BYTE, c.world(r), 21, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
    out.push_back(std::move(b));
  }
#endif
  return out;
}

void sweepBarrier(const SweepComm& c) {
#ifdef HL_HAVE_MPI
  if (c.mpi) MPI_Barrier(MPI_COMM_WORLD);
#else
  (void)c;
#endif
}

void sweepAbort(const SweepComm& c, int code) {
#ifdef HL_HAVE_MPI
  if (c.mpi) MPI_Abort(MPI_COMM_WORLD, code);
#else
  (void)c;
#endif
  std::exit(code);
}

namespace {

class MpiStageLink final : public StageLink {
 public:
  explicit MpiStageLink(const SweepComm& c) : c_(c) {
#ifdef HL_HAVE_MPI
    if (c.mpi) {  // the ranks sharing this host's memory (MPI-3), numbered as in the world
      MPI_Comm node = MPI_COMM_NULL;
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c.world(c.rank), MPI_INFO_NULL, &node);
      MPI_Comm_rank(node, &local_);
      MPI_Comm_free(&node);
    }
#endif
    const char* v = std::getenv("HL_PIPELINE_KILL_AFTER");
    if (!v || !*v) return;
    const std::string s = v;
    const auto colon = s.find(':');
    if (colon == std::string::npos || std::atoi(s.substr(colon + 1).c_str()) == c.world(c.rank))
      kill_after_ = std::atoi(s.substr(0, colon).c_str());
  }
  int rank() const override { return c_.rank; }
  int size() const override { return c_.size; }
  int local_rank() const override { return local_; }
  void send(int to, const void* data, size_t bytes) override {
    if (kill_after_ > 0 && ++sent_ >= kill_after_) ::kill(::getpid(), SIGKILL);
#ifdef HL_HAVE_MPI
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t at = 0; at < bytes || at == 0; at += kChunk) {
      MPI_Send(p + at, static_cast<int>(std::min(kChunk, bytes - at)), MPI_BYTE, c_.world(to), kTag, MPI_COMM_WORLD);
      if (bytes == 0) break;
    }
#else
    (void)to, (void)data, (void)bytes;
    throw Error("pipeline: this build has no MPI");
#endif
  }
  void recv(int from, void* data, size_t bytes) override {
#ifdef HL_HAVE_MPI
    auto* p = static_cast<uint8_t*>(data);
    for (size_t at = 0; at < bytes || at == 0; at += kChunk) {
      const size_t want = std::min(kChunk, bytes - at);
      MPI_Status st;
      MPI_Recv(p + at, static_cast<int>(want), MPI_BYTE, c_.world(from), kTag, MPI_COMM_WORLD, &st);
      int got = 0;
      MPI_Get_count(&st, MPI_BYTE, &got);
      if (static_cast<size_t>(got) != want)
        throw Error("pipeline: rank " + std::to_string(from) + " sent " + std::to_string(got) + " bytes, expected " +
                    std::to_string(want));
      if (bytes == 0) break;
    }
#else
    (void)from, (void)data, (void)bytes;
    throw Error("pipeline: this build has no MPI");
#endif
  }

 private:
  static constexpr size_t kChunk = size_t{1} << 30;
  static constexpr int kTag = 22;
  SweepComm c_;
  int kill_after_ = 0, sent_ = 0, local_ = 0;
};

}  // namespace

std::unique_ptr<StageLink> mpiStageLink(const SweepComm& c) {
  return std::make_unique<MpiStageLink>(c);
}

void sweepFinalize(const SweepComm& c) {
#ifdef HL_HAVE_MPI
  if (c.mpi) MPI_Finalize();
#else
  (void)c;
#endif
}

}  // namespace hl::cli
