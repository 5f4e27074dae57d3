// The golden runs of tests/golden (each <case>/expected/runs.json, from the NumPy reference
// tools/reference/jamba_ref.py), the toggles of one runs.json entry, and feeding a run's tokens to
// a backend: shared by the CPU golden test, the Vulkan tests and the demo-model test.
// Not the comparisons: each test states its own tolerance.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/model/loader.h"

namespace hl::golden_test {

struct GoldenRun {
  std::string case_dir, name;
  std::vector<int32_t> ids;
  RunOptions opts;
};

inline void PrintTo(const GoldenRun& g, std::ostream* os) {
  *os << g.case_dir << " run " << g.name;
}

// "token_ids" of one runs.json entry.
inline std::vector<int32_t> token_ids(const nlohmann::json& r) {
  std::vector<int32_t> ids;
  for (const auto& id : r.at("token_ids")) ids.push_back(id.get<int32_t>());
  return ids;
}

// The toggles of one runs.json entry into `opts`: "normalizer" and "registers" (absent or null: as
// trained). An unknown normalizer fails the test, naming `what`.
inline void apply_toggles(const nlohmann::json& r, RunOptions* opts, const std::string& what) {
  if (r.contains("normalizer") && !r["normalizer"].is_null()) {
    opts->normalizer_override = true;
    EXPECT_TRUE(parse_normalizer(r["normalizer"].get<std::string>(), &opts->normalizer)) << what;
  }
  if (r.contains("registers") && !r["registers"].is_null()) opts->registers = r["registers"].get<int>();
}

// Every run of every case under HL_GOLDEN_DIR (cases in name order), with all instruments on.
inline std::vector<GoldenRun> golden_runs() {
  namespace fs = std::filesystem;
  std::vector<GoldenRun> runs;
  const fs::path root = HL_GOLDEN_DIR;
  if (!fs::exists(root)) return runs;
  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory() && fs::exists(e.path() / "expected" / "runs.json")) cases.push_back(e.path());
  std::sort(cases.begin(), cases.end());
  for (const fs::path& c : cases) {
    std::ifstream in(c / "expected" / "runs.json");
    const nlohmann::json j = nlohmann::json::parse(in);
    for (const auto& r : (j.is_array() ? j : j.at("runs"))) {
      GoldenRun g;
      g.case_dir = c.string();
      g.name = r.at("name").get<std::string>();
      g.ids = token_ids(r);
      g.opts.full = true;
      apply_toggles(r, &g.opts, g.case_dir + " run " + g.name);
      runs.push_back(g);
    }
  }
  return runs;
}

// Starts `b` with `opts` and feeds `ids`: as one prefill, or one decode step per token.
// Why `backend` (available here) cannot run the checkpoint in case_dir — a mixer kind or a layer
// parameter it has no kernel for, the one-line BackendFailure of layer_modules.h — or "" when it can.
// Device tests skip such a case with this message; any other failure propagates.
inline std::string backend_lacks(const std::string& backend, const std::string& case_dir) {
  try {
    (void)make_backend(backend, load_model(case_dir));
  } catch (const BackendFailure& e) {
    const std::string m = e.what();
    if (m.find("no module for") != std::string::npos || m.find("no kernel for") != std::string::npos) return m;
    throw;
  }
  return "";
}

inline std::vector<TokenTrace> run_tokens(Backend& b, const std::vector<int32_t>& ids, const RunOptions& opts,
                                          bool prefill) {
  b.start(opts);
  std::vector<TokenTrace> recs;
  if (prefill)
    b.forward(ids.data(), static_cast<int64_t>(ids.size()), &recs);
  else
    for (int32_t id : ids) b.forward(&id, 1, &recs);
  return recs;
}

}  // namespace hl::golden_test
