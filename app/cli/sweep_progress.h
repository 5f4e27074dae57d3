// The progress files of `hybridlens sweep` (stats-format.md, "Resuming"): FILE.hlstats.partial of a
// one-rank sweep, FILE.hlstats.partial.R-of-N of rank R of N. A resumed sweep reads every one of them,
// whatever rank count wrote it: each rank continues its own file of the current rank count; the
// files of another rank count (a sweep restarted on fewer or more ranks, a node lost) are adopted by
// rank 0, which merges their aggregates and finished prompts into its own, saves its file and then
// removes them. The prompts no file has finished are spread over the ranks as in a fresh sweep.
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sessions/sweep_stats.h"

namespace hl::cli {

// The progress file of rank `rank` of `size` for the stats file `out`.
std::string sweepProgressPath(const std::string& out, int rank, int size);

struct SweepProgress {
  SweepStats stats;                 // this rank's aggregate to continue (rank 0: the adopted ones merged in)
  std::vector<int64_t> finished;    // this rank's finished prompts to continue
  std::set<int64_t> done;           // every finished prompt of the sweep, on every rank
  std::vector<std::string> adopted;  // files of another rank count rank 0 removes once it saved its own
  std::string note;                 // what was resumed, for stderr ("" when nothing)
};

// Reads every progress file of `out` (the job `job`: checkpoint, adapter, prompts file, options; a
// file of another job is refused in one line naming what differs) for rank `rank` of `size`, with
// `empty` the aggregate of no prompt and `prompts` the prompts file's length. Files of another rank
// count whose prompts a file of this count already holds (an adoption interrupted before its
// removal) are left out and removed with the adopted ones; prompts claimed by two files otherwise
// are refused. Throws Error naming the file.
SweepProgress readSweepProgress(const std::string& out, int rank, int size, const nlohmann::ordered_json& job,
                                const SweepStats& empty, int64_t prompts);

}  // namespace hl::cli
