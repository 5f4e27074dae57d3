// Shared data of the view tests: a generated demo-random checkpoint run by the real CPU engine with
// the full instruments, token by token, as run A (as trained) and run B (softmax-1), plus DoRA rows
// of a second random checkpoint against the first. Built once per test process.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/model/weights.h"
#include "engine/probes/dora_probe.h"
#include "sessions/recording.h"
#include "views/view_state.h"

namespace hl::test {

struct DemoData {
  std::string dir;  // checkpoint folder
  std::shared_ptr<hl::Model> model;
  hl::Recording rec;              // runs "A" (as trained) and "B" (softmax1), same tokens
  std::vector<hl::DoraRow> dora;  // second checkpoint vs the first (dora_rows_tuned)
};

const DemoData& demo();
// Feeds `ids` one at a time through a fresh CPU backend.
std::vector<hl::TokenTrace> runEngine(const hl::Model& m, const std::vector<int32_t>& ids, const hl::RunOptions& o);
// A fresh empty folder in the test process's scratch folder (process_scratch: removed when the
// process ends, kept when a test failed).
std::string tempDir(const std::string& tag);
// A ViewState over demo(): run A, optional B, the step and layer.
hl::views::ViewState demoState(int step, int layer = -1, bool withB = false, bool diff = false);

}  // namespace hl::test
