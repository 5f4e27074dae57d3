// Sweep stats files (.hlstats, resources/docs/stats-format.md): one safetensors file holding a
// SweepStats — one tensor per statistic ("attn_entropy.mean" shaped (A_n, nh), ...) and a JSON
// manifest in `__metadata__` ("hybridlens_stats"). The same layout carries a sweep's progress file
// and the aggregates MPI ranks send to rank 0; those store the double statistics exactly (their
// IEEE-754 bits in I64 tensors, "storage": "f64-bits") where the stats file has F32.
// Not the aggregation (sweep_stats.h) and not the command (app/cli/cmd_sweep.cpp).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sessions/sweep_stats.h"

namespace hl {

constexpr int kStatsFormatVersion = 2;  // 2: ssm_hidden_entropy and ssm_hidden_first_mass
constexpr const char* kStatsMetadataKey = "hybridlens_stats";
constexpr const char* kStatsFormatName = "hybridlens-stats";
constexpr const char* kStatsExtension = ".hlstats";

struct SweepFile {
  nlohmann::ordered_json manifest;  // the writer's fields and the caller's (checkpoint, options, ...)
  SweepStats stats;
  bool exact = false;             // doubles stored bit-exact (progress files, MPI messages)
  std::vector<int64_t> finished;  // progress files: indices of the finished prompts
};

// The file's bytes. `extra` (an object) is copied into the manifest first (checkpoint identity,
// options, schedule...); `exact` stores the doubles bit-exact; `finished` (when given) is written as
// tensor "progress.finished".
std::vector<uint8_t> serialize_sweep_stats(const SweepStats& st, const nlohmann::ordered_json& extra, bool exact,
                                           const std::vector<int64_t>* finished = nullptr);
// serialize_sweep_stats written atomically (engine/io/atomic_file.h). Throws Error.
void save_sweep_stats(const std::string& path, const SweepStats& st, const nlohmann::ordered_json& extra, bool exact,
                      const std::vector<int64_t>* finished = nullptr);

// Reads a stats or progress file (untrusted input): every declared size is checked before anything
// is allocated, and the tensors against each other (sketch and histogram counts summing to the
// count, keys in range and increasing); a problem throws LoadError naming the file, the object and
// the allowed range.
SweepFile load_sweep_stats(const std::string& path);
SweepFile parse_sweep_stats(const uint8_t* bytes, uint64_t size, const std::string& name);

}  // namespace hl
