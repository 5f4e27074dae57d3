// `hybridlens dora --base DIR (--adapter PEFT_DIR | --tuned DIR) --out FILE.csv` (trace-format.md §4):
// ΔM / ΔD per adapted matrix (Liu et al. 2024) written as CSV, the least-squares slope of ΔM on ΔD
// printed as `slope_dM_on_dD: <value>`, and a per-layer summary. Runs no model; the math is in
// engine/probes/dora_probe.cpp, the adapter reading in engine/io/adapter.cpp.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "app/cli/args.h"
#include "app/cli/commands.h"
#include "engine/io/adapter.h"
#include "engine/model/loader.h"
#include "engine/probes/dora_probe.h"

namespace hl::cli {

int runDora(const std::vector<std::string>& args) {
  ArgParser p("dora", "--base DIR (--adapter PEFT_DIR | --tuned DIR) --out FILE.csv",
              "Magnitude and direction change of every adapted matrix (Liu et al. 2024): one CSV row\n"
              "`layer,module,delta_m,delta_d` per matrix, with dM = mean_j | |W'_j| - |W0_j| | and\n"
              "dD = mean_j (1 - cos(W'_j, W0_j)) over output rows j, and the least-squares slope of dM on dD.");
  p.option("base", "DIR", "base checkpoint folder (config.json + safetensors)", true)
      .option("adapter", "PEFT_DIR",
              "PEFT LoRA / DoRA adapter folder (adapter_config.json + adapter_model.safetensors)")
      .option("tuned", "DIR", "fine-tuned checkpoint folder: every 2-D linear weight inside the layers")
      .option("out", "FILE.csv", "where to write the rows (written atomically)", true);
  ParsedArgs a = p.parse(args);
  if (a.helpRequested()) {
    std::fputs(p.usage().c_str(), stdout);
    return 0;
  }
  if (a.has("adapter") == a.has("tuned")) throw UsageError("give exactly one of --adapter PEFT_DIR and --tuned DIR");

  std::shared_ptr<Model> base = load_model(a.get("base"));
  std::vector<DoraRow> rows;
  std::string source;
  if (a.has("adapter")) {
    const Adapter adapter = load_adapter(a.get("adapter"), *base);
    rows = dora_rows_adapter(*base, adapter);
    int dora = 0;
    for (const AdapterModule& m : adapter.modules) dora += m.is_dora() ? 1 : 0;
    source = "adapter " + adapter.dir + " (" + (dora ? "DoRA" : "LoRA") + ", r " + std::to_string(adapter.config.r) +
             (adapter.config.use_rslora ? ", rsLoRA" : "") + ")";
  } else {
    std::shared_ptr<Model> tuned = load_model(a.get("tuned"));
    rows = dora_rows_tuned(*base, *tuned);
    source = "tuned checkpoint " + tuned->dir;
  }
  write_dora_csv(a.get("out"), rows);

  const std::vector<DoraLayerSummary> layers = dora_layer_summary(rows);
  std::printf("dora: %zu matrices in %zu layers, %s against %s\n", rows.size(), layers.size(), source.c_str(),
              base->dir.c_str());
  std::printf("%7s %9s %15s %15s\n", "layer", "matrices", "mean_dM", "mean_dD");
  for (const DoraLayerSummary& s : layers) {
    const std::string name = s.layer < 0 ? std::string("lm_head") : std::to_string(s.layer);
    std::printf("%7s %9d %15.6g %15.6g\n", name.c_str(), s.matrices, s.mean_delta_m, s.mean_delta_d);
  }
  std::printf("slope_dM_on_dD: %.9g\n", least_squares_slope(rows));
  std::printf("wrote %s\n", a.get("out").c_str());
  return 0;
}

}  // namespace hl::cli
