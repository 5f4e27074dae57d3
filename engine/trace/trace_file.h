// The trace file of trace-format.md §3: stacks per-token TokenTraces into the named tensors of a
// safetensors file with the metadata. Also reads one back (for export and tests).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "engine/model/token_trace.h"
#include "engine/model/weights.h"

namespace hl {

struct TraceMeta {
  std::string checkpoint, config_sha256, normalizer = "as-trained", registers, adapter, backend;
};

// Writes every tensor of §3 for the records (the --full ones when the records carry them).
// n_reg: registers of the run (for the attn_rows key axis). Atomic write.
void write_trace(const std::string& path, const Model& model, int n_reg, const std::vector<TokenTrace>& records,
                 const TraceMeta& meta);

}  // namespace hl
