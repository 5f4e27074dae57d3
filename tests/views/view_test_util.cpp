// Demo data of the view tests (see view_test_util.h) and the test main: a QApplication on the
// offscreen platform (unless QT_QPA_PLATFORM says otherwise) around GoogleTest.
#include "tests/views/view_test_util.h"

#include <gtest/gtest.h>

#include <QApplication>
#include <cstdlib>
#include <filesystem>

#include "engine/backend/backend.h"
#include "engine/model/generator.h"
#include "engine/model/loader.h"
#include "tests/engine/test_util.h"

namespace fs = std::filesystem;

namespace hl::test {

std::string tempDir(const std::string& tag) {
  static int counter = 0;
  const fs::path p = fs::path(process_scratch()) / (tag + "_" + std::to_string(counter++));
  fs::create_directories(p);
  return p.string();
}

std::vector<hl::TokenTrace> runEngine(const hl::Model& m, const std::vector<int32_t>& ids, const hl::RunOptions& o) {
  std::shared_ptr<const hl::Model> shared(&m, [](const hl::Model*) {});
  std::unique_ptr<hl::Backend> be = hl::make_backend("cpu", shared);
  be->start(o);
  std::vector<hl::TokenTrace> out;
  for (int32_t id : ids) be->forward(&id, 1, &out);
  return out;
}

const DemoData& demo() {
  static const DemoData d = [] {
    DemoData x;
    x.dir = tempDir("demo");
    hl::GenerateOptions g;
    g.config = hl::preset_config("demo-random");  // 8 layers, attention at 2 and 6, MoE on odd layers
    g.seed = 7;
    hl::generate_checkpoint(x.dir, g);
    x.model = hl::load_model(x.dir);
    const std::vector<int32_t> ids = {1, 17, 300, 300, 42, 9, 1000, 5, 77, 300, 12, 2048, 3, 300, 64, 8};
    x.rec.config = x.model->config;
    x.rec.checkpoint.name = x.model->name;
    x.rec.tokens = ids;
    hl::RunOptions oa;
    oa.full = true;
    hl::Run a;
    a.label = "A";
    a.records = runEngine(*x.model, ids, oa);
    a.load_seconds = 0.25;
    hl::RunOptions ob = oa;
    ob.normalizer_override = true;
    ob.normalizer = hl::Normalizer::Softmax1;
    hl::Run b;
    b.label = "B";
    b.settings.normalizer_override = true;
    b.settings.normalizer = hl::Normalizer::Softmax1;
    b.records = runEngine(*x.model, ids, ob);
    x.rec.runs = {std::move(a), std::move(b)};
    const std::string tunedDir = tempDir("tuned");
    g.seed = 8;
    hl::generate_checkpoint(tunedDir, g);
    std::shared_ptr<hl::Model> tuned = hl::load_model(tunedDir);
    x.dora = hl::dora_rows_tuned(*x.model, *tuned);
    return x;
  }();
  return d;
}

hl::views::ViewState demoState(int step, int layer, bool withB, bool diff) {
  const DemoData& d = demo();
  hl::views::ViewState s;
  s.rec = &d.rec;
  s.a = &d.rec.runs[0];
  s.b = withB ? &d.rec.runs[1] : nullptr;
  s.step = step;
  s.layer = layer;
  s.showDiff = diff;
  s.dora = &d.dora;
  s.hw.weightBytesPerToken = d.model->weight_bytes_per_token();
  s.hw.bandwidthGBs = 10.0;
  s.hw.deviceMemoryBytes = 16e9;
  s.hw.deviceName = "test device";
  return s;
}

}  // namespace hl::test

int main(int argc, char** argv) {
  if (std::getenv("QT_QPA_PLATFORM") == nullptr) ::setenv("QT_QPA_PLATFORM", "offscreen", 1);
  QApplication app(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
