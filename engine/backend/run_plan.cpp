// plan_run (run_plan.h): the register count, the per-layer normalizer resolution and the context
// bound of a run, shared by the CPU, Vulkan and CUDA backends' start().
#include "engine/backend/run_plan.h"

#include <string>

#include "engine/core/error.h"

namespace hl {

RunPlan plan_run(const Model& m, const RunOptions& opts) {
  const JambaConfig& c = m.config;
  if (opts.registers > kMaxRunRegisters)
    throw Error("registers: " + std::to_string(opts.registers) + " is out of range [0, " +
                std::to_string(kMaxRunRegisters) + "]");
  RunPlan p;
  p.trained_registers = c.hidden_size > 0 ? static_cast<int64_t>(m.w.register_rows.size()) / c.hidden_size : 0;
  p.registers = opts.registers < 0 ? static_cast<int>(p.trained_registers) : opts.registers;
  const size_t L = static_cast<size_t>(c.num_hidden_layers);
  p.normalizer.assign(L, Normalizer::Softmax);
  p.sinks.assign(L, 0);
  for (size_t i = 0; i < L && i < m.w.layers.size() && static_cast<int64_t>(i) < m.schedule.size(); ++i) {
    const LayerWeights& lw = m.w.layers[i];
    if (!m.schedule[static_cast<int64_t>(i)].has_attention()) continue;
    const bool has_sinks = !lw.attn.sinks.empty();
    p.normalizer[i] = opts.normalizer_override ? opts.normalizer
                      : has_sinks              ? Normalizer::Sink
                                               : c.attention_normalizer;
    p.sinks[i] = p.normalizer[i] == Normalizer::Sink && has_sinks;
  }
  p.context_limit = context_limit(opts, c);
  return p;
}

}  // namespace hl
