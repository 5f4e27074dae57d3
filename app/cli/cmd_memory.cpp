// `hybridlens memory --config config.json --context N [--dtype-bytes B] [--json]` (trace-format.md §4,
// Lieber et al. 2024): KV-cache and Mamba-state bytes of the model, its all-attention counterfactual and
// a pure-Mamba stack at one context length, plus this machine's memory.
#include <cinttypes>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "app/cli/args.h"
#include "app/cli/commands.h"
#include "engine/core/sys_memory.h"
#include "engine/io/config.h"
#include "engine/probes/memory.h"

namespace hl::cli {

int runMemory(const std::vector<std::string>& args) {
  ArgParser p("memory", "--config FILE --context N [--dtype-bytes B] [--json]",
              "KV-cache and Mamba-state bytes at a context length: the model, all-attention, all-Mamba.");
  p.option("config", "FILE", "a Jamba config.json", true)
      .option("context", "N", "context length in tokens (1 .. 2^31)", true)
      .option("dtype-bytes", "B", "bytes per cached element (1 .. 8, default 4: fp32, as the engine keeps the KV cache and the state)")
      .flag("json", "print one JSON object");
  const ParsedArgs a = p.parse(args);
  if (a.helpRequested()) {
    std::fputs(p.usage().c_str(), stdout);
    return 0;
  }
  const JambaConfig c = load_config_file(a.get("config"));
  const int64_t n = a.getInt("context", 1, int64_t{1} << 31);
  const int64_t b = a.getIntOr("dtype-bytes", 4, 1, 8);
  const LayerSchedule sched = LayerSchedule::from_config(c);
  const MemoryReport r = memory_report(c, sched, n, b);
  const uint64_t ram = physical_memory();  // the machine, not what is free: see `available_memory`
  if (a.has("json")) {
    nlohmann::json j = {{"context", n},
                        {"dtype_bytes", b},
                        {"kv_bytes", r.kv_bytes},
                        {"kv_bytes_all_attention", r.kv_bytes_all_attention},
                        {"kv_bytes_all_mamba", r.kv_bytes_all_mamba},
                        {"state_bytes", r.state_bytes},
                        {"state_bytes_all_mamba", r.state_bytes_all_mamba},
                        {"attention_layers", sched.num_attention()},
                        {"mamba_layers", sched.num_ssm()},
                        {"device_memory_bytes", ram}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  const double gib = 1024.0 * 1024.0 * 1024.0;
  std::printf("context %" PRId64 " tokens, %" PRId64 " bytes per element\n", n, b);
  std::printf("  KV cache, this model (%" PRId64 " attention layers): %" PRId64 " bytes (%.3f GiB)\n",
              sched.num_attention(), r.kv_bytes, r.kv_bytes / gib);
  std::printf("  KV cache, every layer attention:       %" PRId64 " bytes (%.3f GiB)\n", r.kv_bytes_all_attention,
              r.kv_bytes_all_attention / gib);
  std::printf("  KV cache, every layer Mamba:           %" PRId64 " bytes\n", r.kv_bytes_all_mamba);
  std::printf("  Mamba state, this model:               %" PRId64 " bytes (%.3f MiB)\n", r.state_bytes,
              r.state_bytes / (1024.0 * 1024.0));
  std::printf("  Mamba state, every layer Mamba:        %" PRId64 " bytes (%.3f MiB)\n", r.state_bytes_all_mamba,
              r.state_bytes_all_mamba / (1024.0 * 1024.0));
  if (ram) std::printf("  memory of this machine (CPU backend):  %" PRIu64 " bytes (%.1f GiB)\n", ram, ram / gib);
  return 0;
}

}  // namespace hl::cli
