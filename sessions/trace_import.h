// Trace file → Recording (trace-format.md §3): reads a `hybridlens trace` safetensors file back into
// one run "A" of per-token records so the views can draw it (`hybridlens export --trace`). The trace
// holds no config.json: pass the checkpoint's config for exact dimensions, or the importer infers
// them from the tensor shapes (layer kinds by Jamba's period/offset rule; see import_trace).
#pragma once
#include <cstdint>
#include <string>

#include "engine/io/config.h"
#include "sessions/recording.h"

namespace hl {

struct TraceImportOptions {
  const JambaConfig* config = nullptr;  // the checkpoint's config; null: inferred from the shapes
  bool logits = true;                   // copy logits (T, V) into the records (the largest tensor)
};

// Reads and validates a trace file (untrusted input): format_version "1", every tensor's dtype and
// shape consistent with T = len(token_ids) and the model's dimensions (A_n + M_n = L, attn_rows with
// n_reg + T + 1 keys, the metadata's registers). Throws LoadError naming the file, the tensor, its
// shape and the expected one. The recording has one run "A" with settings from the metadata;
// token_text is empty (a trace stores ids only); step times are 0 (a trace does not store them).
// Without a config the inferred one has the trace's L, A_n/M_n/X_n (the layer schedule of
// jamba_period_offset, engine/model/layer_schedule.h: attention at i % p == p/2 with p = L / A_n,
// the same rule for MoE layers), nh, E, k, V, Di, and head sizes chosen so that the
// KV-cache and Mamba-state formulas of engine/probes/memory.h reproduce the trace's byte counters.
// Declared sizes are bounded by engine/io/input_limits.h (the limits of config.json and sessions)
// and the records' total by engine/core/sys_memory.h's available memory, all before allocating;
// a file with holes (sparse) is refused; copied pages of the mapping are released as it goes.
Recording import_trace(const std::string& path, const TraceImportOptions& opts = {});
// The same on an in-memory buffer (the fuzz target, tests); `name` names it in messages.
Recording parse_trace(const uint8_t* bytes, uint64_t size, const std::string& name,
                      const TraceImportOptions& opts = {});

}  // namespace hl
