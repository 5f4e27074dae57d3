// The cases the backends are checked on against the reference forward layer by layer
// (test_reference_oracle.cpp for the CPU, test_vulkan_intermediates.cpp for Vulkan): every golden run
// plus the demo-random preset with sinks and trained registers, and the per-tensor report of the worst
// deviation (HL_REFERENCE_REPORT=1). Not the comparison itself (reference_test_util.h).
#pragma once
#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "engine/model/generator.h"
#include "tests/engine/golden_util.h"
#include "tests/engine/reference_test_util.h"
#include "tests/engine/test_util.h"

namespace hl::reftest {

// OracleCase::dir of the generated demo checkpoint.
inline const std::string kDemo = "@demo-random";

// The folder of a case: the demo checkpoint is generated on first use (a few MB, deterministic).
inline std::string case_dir(const std::string& dir) {
  if (dir != kDemo) return dir;
  static const test::TempDir tmp;
  static const bool made = [] {
    GenerateOptions g;
    g.config = preset_config("demo-random");
    g.seed = 7;
    g.dtype = DType::BF16;
    g.sinks = true;
    g.trained_registers = 2;
    generate_checkpoint(tmp.path, g);
    return true;
  }();
  (void)made;
  return tmp.path;
}

struct OracleCase {
  std::string name, dir;
  std::string golden_file;  // the NumPy reference's trace of this run (tests/golden), or empty
  std::vector<int32_t> ids;
  RunOptions opts;
};

inline void PrintTo(const OracleCase& c, std::ostream* os) {
  *os << c.name;
}

inline std::vector<OracleCase> oracle_cases() {
  std::vector<OracleCase> cases;
  for (const golden_test::GoldenRun& g : golden_test::golden_runs())
    cases.push_back({std::filesystem::path(g.case_dir).filename().string() + "_" + g.name, g.case_dir,
                     g.case_dir + "/expected/" + g.name + ".safetensors", g.ids, g.opts});
  // The demo-random preset (bf16, 8 layers, E 8, V 4096) generated with learned sinks and 2 trained
  // registers: as trained (sink), softmax without registers, softmax-1 with 3 (2 trained, 1 test-time).
  const std::vector<int32_t> ids = {1, 17, 400, 4095, 9, 9, 2000, 33, 5};
  auto demo = [&](const std::string& name, bool override, Normalizer n, int registers) {
    OracleCase c{"demo_random_" + name, kDemo, "", ids, RunOptions{}};
    c.opts.normalizer_override = override;
    c.opts.normalizer = n;
    c.opts.registers = registers;
    c.opts.full = true;
    cases.push_back(c);
  };
  demo("as_trained", false, Normalizer::Softmax, -1);
  demo("softmax", true, Normalizer::Softmax, 0);
  demo("softmax1_registers_3", true, Normalizer::Softmax1, 3);
  return cases;
}

inline std::string case_name(const ::testing::TestParamInfo<OracleCase>& info) {
  std::string n = info.param.name;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

// With HL_REFERENCE_REPORT=1: the worst |Δ| / scale per tensor of one comparison.
inline void report(const std::string& what, const std::map<std::string, Worst>& worst) {
  if (!std::getenv("HL_REFERENCE_REPORT")) return;
  for (const auto& [name, w] : worst)
    std::printf("[ oracle ] %-40s %-14s max |diff|/scale %.3g\n", what.c_str(), name.c_str(), w.rel);
}

}  // namespace hl::reftest
