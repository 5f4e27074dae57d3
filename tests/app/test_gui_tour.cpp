// The demo models' guided tour (issue 20 item 3): File > Open demo model offers each model's stops,
// one click plays a stop on the real bundled baseline (its prompt as run A, the stop's toggle as run
// B, its layer and head selected, the sentence shown), and the tour file's reader turns every kind
// of damage into one line naming the file, the stop and the field.
#include <gtest/gtest.h>

#include <QAction>
#include <QDockWidget>
#include <QFileInfo>
#include <QMenu>
#include <QMenuBar>
#include <fstream>

#include "app/demo_tour.h"
#include "app/inspector_context.h"
#include "app/run_panel.h"
#include "engine/core/error.h"
#include "gui_test_util.h"

using namespace hl::test;  // Harness, TempDir, waitFor

namespace {

void writeText(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

const char* kStop = R"({"id": "sink", "model": "baseline", "title": "A sink", "prompt": "The sort command writes",
  "view": "dora", "layer": 2, "head": 1, "token": 3, "compare": {"normalizer": "softmax1"},
  "look_for": "Layer 2 looks at the first token."})";

QMenu* submenu(QMenu* m, const QString& text) {
  for (QAction* a : m->actions())
    if (a->menu() && a->text() == text) return a->menu();
  return nullptr;
}

TEST(DemoTour, MenuOffersTheStops_AndOneClickPlaysAStopOnTheBundledBaseline) {
  TempDir tmp("tour");
  const fs::path models = tmp.path / "models";
  fs::create_directories(models);
  fs::create_directory_symlink(fs::path(HL_SOURCE_DIR) / "resources" / "models" / "baseline", models / "baseline");
  // A second stop names a model that is not bundled: it is not offered.
  writeText(models / "tour.json", std::string(R"({"format": "hybridlens-tour", "version": 1, "stops": [)") + kStop +
                                      R"(, {"id": "other", "model": "softmax1", "title": "Elsewhere", "prompt": "x",
                                      "view": "attention", "look_for": "y"}]})");
  const std::unique_ptr<Harness> owner = harnessWithModels(models);
  Harness& h = *owner;
  QMenu* demoMenu = demoMenuOf(h);
  ASSERT_NE(demoMenu, nullptr);
  QMenu* baseline = submenu(demoMenu, "baseline");
  ASSERT_NE(baseline, nullptr);
  QAction* stop = nullptr;
  QStringList names;
  for (QAction* a : baseline->actions()) {
    names << a->text();
    if (a->text() == "A sink") stop = a;
  }
  ASSERT_NE(stop, nullptr) << names.join(", ").toStdString();
  EXPECT_TRUE(names.contains("Open baseline")) << names.join(", ").toStdString();
  EXPECT_EQ(stop->toolTip(), QString("Layer 2 looks at the first token."));
  EXPECT_EQ(submenu(demoMenu, "softmax1"), nullptr);

  stop->trigger();
  ASSERT_TRUE(waitFor([&] { return (!h->tourPlaying() && !h->isBusy() && !h->isLoading()) || !h.errors.isEmpty(); }));
  ASSERT_TRUE(h.errors.isEmpty()) << h.errors.join('\n').toStdString();
  ASSERT_NE(h->runA(), nullptr);
  EXPECT_EQ(h->modelInfo()->name, QString("baseline"));
  EXPECT_EQ(h->runPanel()->promptText(), QString("The sort command writes"));
  EXPECT_FALSE(h->runPanel()->idsMode());
  // Run A: every prompt token (BOS + 4 pieces at least), as trained; run B: softmax-1 on the same tokens.
  EXPECT_GE(h->runA()->records.size(), 5u);
  EXPECT_EQ(h->runA()->prompt_tokens, static_cast<int64_t>(h->runA()->records.size()));
  EXPECT_FALSE(h->runA()->settings.normalizer_override);
  ASSERT_NE(h->runB(), nullptr);
  EXPECT_TRUE(h->runB()->settings.normalizer_override);
  EXPECT_EQ(h->runB()->settings.normalizer, hl::Normalizer::Softmax1);
  EXPECT_EQ(h->runB()->records.size(), h->runA()->records.size());
  EXPECT_EQ(h->context()->layer(), 2);
  EXPECT_EQ(h->context()->head(), 1);
  EXPECT_TRUE(h->tourNote().contains("Layer 2 looks at the first token.")) << h->tourNote().toStdString();
  EXPECT_EQ(h->context()->step(), 3);  // the stop's token
  for (QDockWidget* d : h->findChildren<QDockWidget*>())
    if (d->objectName() == "dock_dora") EXPECT_TRUE(d->isVisible());

  // Played again on the open model: a new run A as trained (not inheriting run B's toggle).
  stop->trigger();
  ASSERT_TRUE(waitFor([&] { return (!h->tourPlaying() && !h->isBusy()) || !h.errors.isEmpty(); }));
  ASSERT_TRUE(h.errors.isEmpty()) << h.errors.join('\n').toStdString();
  EXPECT_FALSE(h->runA()->settings.normalizer_override);
  ASSERT_NE(h->runB(), nullptr);
  EXPECT_EQ(h->runB()->settings.normalizer, hl::Normalizer::Softmax1);
}

TEST(DemoTour, ShippedTourNamesBundledModelsAndKnownViews) {
  const QString root = QString(HL_SOURCE_DIR) + "/resources/models";
  const std::vector<hl::app::TourStop> stops =
      hl::app::readTour(root + "/tour.json", {"ribbon", "entropy", "attention", "rank1", "ssm_delta", "router", "memory",
                                              "dora", "outliers", "latency", "candidates"});
  ASSERT_GE(stops.size(), 4u);
  for (const hl::app::TourStop& s : stops)
    EXPECT_TRUE(QFileInfo::exists(root + "/" + s.model + "/config.json") ||
                QFileInfo::exists(root + "/finetunes/" + s.model + "/adapter_config.json"))
        << s.model.toStdString();
}

// Corruption table: each damaged file gives one line naming the file and what is wrong.
TEST(DemoTour, ReaderTurnsEveryDamageIntoOneLine) {
  TempDir tmp("tour-bad");
  const std::string head = R"({"format": "hybridlens-tour", "version": 1, "stops": [)";
  auto stopWith = [](const std::string& field) {
    return std::string(R"({"id": "a", "model": "baseline", "title": "t", "prompt": "p", "view": "dora", "look_for": "l")") +
           (field.empty() ? "" : ", " + field) + "}";
  };
  struct Case {
    const char* what;
    std::string text;
    const char* expect;
  };
  std::string many = head;
  for (int i = 0; i < 65; ++i) many += (i ? "," : "") + stopWith("").replace(7, 3, "\"s" + std::to_string(i) + "\"");
  many += "]}";
  const std::vector<Case> cases = {
      {"empty file", "", "not JSON"},
      {"not an object", "[1, 2]", "JSON object"},
      {"wrong format", R"({"format": "x", "version": 1, "stops": []})", "'format'"},
      {"wrong version", R"({"format": "hybridlens-tour", "version": 2, "stops": []})", "'version' 1"},
      {"stops not an array", R"({"format": "hybridlens-tour", "version": 1, "stops": {}})", "'stops' must be an array"},
      {"too many stops", many, "at most 64"},
      {"stop not an object", head + "3]}", "stop 0: must be an object"},
      {"missing id", head + R"({"model": "baseline"}]})", "'id' is missing"},
      {"bad id", head + stopWith("").replace(7, 3, "\"A B\"") + "]}", "'id' must be lower-case"},
      {"duplicate id", head + stopWith("") + "," + stopWith("") + "]}", "used twice"},
      {"model escapes", head + stopWith("").replace(stopWith("").find("\"baseline\""), 10, "\"../etc\"") + "]}", "'model' must name"},
      {"prompt not a string", head + R"({"id": "a", "model": "baseline", "title": "t", "prompt": 5})" + "]}",
       "'prompt' must be a string"},
      {"prompt too long", head + stopWith("").replace(stopWith("").find("\"p\""), 3, "\"" + std::string(4001, 'x') + "\"") + "]}",
       "'prompt' must have 1 to 4000"},
      {"two lines", head + stopWith("").replace(stopWith("").find("\"l\""), 3, "\"a\\nb\"") + "]}", "one line"},
      {"unknown view", head + stopWith("").replace(stopWith("").find("\"dora\""), 6, "\"plots\"") + "]}", "'view' plots"},
      {"layer out of range", head + stopWith(R"("layer": 5000)") + "]}", "'layer' must be an integer in [0, 1023]"},
      {"token negative", head + stopWith(R"("token": -1)") + "]}", "'token' must be an integer"},
      {"layer fraction", head + stopWith(R"("layer": 1.5)") + "]}", "'layer' must be an integer"},
      {"generate too many", head + stopWith(R"("generate": 1000)") + "]}", "'generate'"},
      {"compare empty", head + stopWith(R"("compare": {})") + "]}", "'compare' must give"},
      {"compare normalizer", head + stopWith(R"("compare": {"normalizer": "relu"})") + "]}", "softmax, softmax1 or sink"},
      {"compare registers", head + stopWith(R"("compare": {"registers": -2})") + "]}", "'registers'"},
  };
  int i = 0;
  for (const Case& c : cases) {
    const fs::path p = tmp.path / ("bad" + std::to_string(i++) + ".json");
    writeText(p, c.text);
    try {
      hl::app::readTour(QString::fromStdString(p.string()), {"dora", "attention"});
      ADD_FAILURE() << c.what << ": accepted";
    } catch (const hl::LoadError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(p.string()), std::string::npos) << c.what << ": " << m;
      EXPECT_NE(m.find(c.expect), std::string::npos) << c.what << ": " << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << c.what << ": " << m;
    }
  }
  // A file over 1 MiB is refused before it is parsed.
  const fs::path big = tmp.path / "big.json";
  writeText(big, std::string((1 << 20) + 10, ' '));
  EXPECT_THROW(hl::app::readTour(QString::fromStdString(big.string()), {"dora"}), hl::LoadError);
  // The good stop reads back field by field.
  const fs::path good = tmp.path / "good.json";
  writeText(good, head + kStop + "]}");
  const auto stops = hl::app::readTour(QString::fromStdString(good.string()), {"dora"});
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0].id, QString("sink"));
  EXPECT_EQ(stops[0].layer, 2);
  EXPECT_EQ(stops[0].head, 1);
  EXPECT_EQ(stops[0].generate, 0);
  ASSERT_TRUE(stops[0].compareNormalizer.has_value());
  EXPECT_EQ(*stops[0].compareNormalizer, hl::Normalizer::Softmax1);
  EXPECT_EQ(stops[0].compareRegisters, -1);
  EXPECT_EQ(stops[0].token, 3);
}

}  // namespace
