// The run-start rules every backend's start() applies, written once (issue 14 item 5): how many
// register rows are fed (trace-format.md §2), which normalizer each attention layer uses this run,
// whether it feeds its trained sink logits as p_null, and the run's context bound. Not the
// feeding itself (feed_registers in backend_util.h, CpuBackend::start) nor the per-token check
// (check_context in token_trace.h, at the top of every forward()).
#pragma once
#include <cstdint>
#include <vector>

#include "engine/model/token_trace.h"
#include "engine/model/weights.h"

namespace hl {

// Most register rows a run may feed (RunOptions::registers).
constexpr int kMaxRunRegisters = 1024;

struct RunPlan {
  int registers = 0;                   // rows fed at start: the trained rows first, then test-time ones
  int64_t trained_registers = 0;       // rows of the checkpoint's register table
  std::vector<Normalizer> normalizer;  // (L,) the normalizer of each attention layer (Softmax elsewhere)
  std::vector<char> sinks;             // (L,) 1 where the layer's trained sink logits are its p_null logits
  int64_t context_limit = 0;           // most tokens the run may hold, registers excluded (context_limit())
};

// The plan of a run of `m` under `opts`. Registers: opts.registers, or the trained count when
// negative; more than kMaxRunRegisters throws Error "registers: N is out of range [0, 1024]".
// Normalizer of attention layer i: opts.normalizer when opts.normalizer_override, else Sink when
// the layer has trained sinks, else config.json's attention_normalizer; its sinks are used when
// its normalizer is Sink and it has them (otherwise a Sink layer's null logits are 0).
RunPlan plan_run(const Model& m, const RunOptions& opts);

}  // namespace hl
