// Stats files for the tests of the summary module and the app's sweep statistics window: the
// demo-random schedule's empty statistics and the manifest fields `hybridlens sweep` writes
// (app/cli/cmd_sweep.cpp), so that a test fills known values and writes a real file.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "engine/model/generator.h"
#include "engine/model/layer_schedule.h"
#include "sessions/sweep_stats.h"
#include "sessions/sweep_summary.h"

namespace hl::test {

inline LayerSchedule demoSchedule(const std::string& preset = "demo-random") {
  return LayerSchedule::from_config(preset_config(preset));
}

// The manifest fields the sweep command adds (checkpoint, options, schedule) for `sched`.
inline nlohmann::ordered_json sweepExtra(const LayerSchedule& sched, const std::string& normalizer = "softmax",
                                         const std::string& name = "demo-random") {
  nlohmann::ordered_json e = nlohmann::ordered_json::object();
  e["checkpoint"] = {{"folder", "/tmp/" + name}, {"name", name}, {"config_sha256", "c0ffee"}, {"weights_hash", "beef"}};
  e["adapter"] = "";
  e["prompts_file"] = {{"sha256", "abc123"}, {"prompts", 3}};
  e["options"] = {{"generate", "4"}, {"normalizer", normalizer}};
  e["prompts_path"] = "prompts.jsonl";
  e["schedule"] = sweep_schedule_json(sched);
  return e;
}

}  // namespace hl::test
