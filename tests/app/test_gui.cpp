// The real main window on Qt's offscreen platform (issue 5 checks): load the generated demo, step,
// scrub, toggle, export — asserting the token strip, views' series against the trace values, run B
// over the same tokens, valid PNG/SVG/PDF/CSV files, and that a bad checkpoint reports the file and
// tensor while the previous model stays usable. Sessions: test_gui_session.cpp.
#include <gtest/gtest.h>

#include <QAction>
#include <QCheckBox>
#include <QCoreApplication>
#include <QDir>
#include <QDockWidget>
#include <QFile>
#include <QImage>
#include <QMenu>
#include <QMenuBar>
#include <QMimeData>
#include <QMouseEvent>
#include <QSettings>
#include <QSpinBox>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTimer>
#include <QUrl>
#include <cmath>
#include <fstream>
#include <functional>
#include <tuple>

#include "app/app_settings.h"
#include "app/run_panel.h"
#include "app/token_strip.h"
#include "engine/io/config.h"
#include "engine/io/safetensors.h"
#include "gui_test_util.h"
#include "views/instrument_view.h"

using namespace hl::test;  // Harness, TempDir, waitFor, demoDir, ignoreEos, ...
using hl::test::fs::path;

namespace {

QString menuTitles(QMenuBar* bar) {
  QString s;
  for (QAction* a : bar->actions()) s += a->text() + ";";
  return s;
}

// The rank-1 view's depth curve at the shown step equals that record's rank1_distance (log axis:
// zeros are gaps), and its "final" curve over tokens equals rank1_distance[L] for every record: a
// scrub moves the cursor, it does not cut the curve (issue 17 finding 11).
void expectRank1Series(hl::views::InstrumentView* v, const hl::Run& a, int step, int L) {
  QCPGraph* depth = v->graph("depth A");
  ASSERT_NE(depth, nullptr);
  ASSERT_EQ(depth->data()->size(), L + 1);
  const std::vector<float>& want = a.records[step].rank1_distance;
  for (int c = 0; c <= L; ++c) {
    const double got = (depth->data()->constBegin() + c)->value;
    if (want[c] > 0)
      EXPECT_EQ(got, static_cast<double>(want[c])) << "depth " << c << " at step " << step;
    else
      EXPECT_TRUE(std::isnan(got)) << "depth " << c;
  }
  QCPGraph* fin = v->graph("final A");
  ASSERT_NE(fin, nullptr);
  ASSERT_EQ(fin->data()->size(), static_cast<int>(a.records.size()));
  for (int t = 0; t < static_cast<int>(a.records.size()); ++t) {
    const float w = a.records[t].rank1_distance[L];
    const double got = (fin->data()->constBegin() + t)->value;
    if (w > 0) EXPECT_EQ(got, static_cast<double>(w)) << "token " << t;
  }
}


}  // namespace

TEST(MainWindow, Constructed_ShowsMenusEveryViewDockedAndStatusBar) {
  Harness h;
  EXPECT_EQ(menuTitles(h->menuBar()), QString("&File;&Run;&View;&Help;"));
  for (const char* a : {"actionOpen", "actionQuit", "actionAbout", "actionSave", "actionOpenSession", "actionExportAll",
                        "actionStep", "actionDark"})
    EXPECT_NE(h->findChild<QAction*>(a), nullptr) << a;
  ASSERT_EQ(h->views().size(), 11u);
  for (hl::views::InstrumentView* v : h->views()) {
    auto* dock = h->findChild<QDockWidget*>("dock_" + v->viewId());
    ASSERT_NE(dock, nullptr) << v->viewId().toStdString();
    EXPECT_EQ(dock->widget(), v);
  }
  EXPECT_FALSE(h->hasModel());
  EXPECT_EQ(h->recording(), nullptr);
  EXPECT_EQ(h->tokenStrip()->count(), 0);
  EXPECT_NE(h->findChild<QLabel*>("backendLabel"), nullptr);
  EXPECT_NE(h->findChild<QLabel*>("memoryLabel"), nullptr);
  EXPECT_NE(h->findChild<QLabel*>("speedLabel"), nullptr);
}

TEST(MainWindow, LoadDemo_StripShowsPromptThenEveryStepAndViewsMatchTheTrace) {
  Harness h;
  ASSERT_TRUE(h.load(demoDir()));
  ignoreEos(h);
  ASSERT_TRUE(h->hasModel());
  EXPECT_EQ(h->modelInfo()->config.num_hidden_layers, 8);
  // The prompt is tokenized and shown before anything is fed.
  EXPECT_EQ(h->tokenStrip()->count(), 4);
  EXPECT_EQ(h->tokenStrip()->fedCount(), 0);
  EXPECT_EQ(h->tokenStrip()->displayText(2), QString("#9"));

  ASSERT_TRUE(h.step(1));
  EXPECT_EQ(h.records(), 1u);
  EXPECT_EQ(h->tokenStrip()->fedCount(), 1);
  ASSERT_TRUE(h.step(6));  // Run N: 3 prompt tokens, then 3 generated
  const hl::Run& a = *h->runA();
  ASSERT_EQ(a.records.size(), 7u);
  EXPECT_EQ(a.prompt_tokens, 4);
  EXPECT_EQ(h->tokenStrip()->count(), 7);
  EXPECT_EQ(h->tokenStrip()->fedCount(), 7);
  EXPECT_FALSE(h->tokenStrip()->chip(3).generated);
  EXPECT_TRUE(h->tokenStrip()->chip(4).generated);
  EXPECT_EQ(h->tokenStrip()->current(), 6);
  for (int t = 0; t < 7; ++t) {
    EXPECT_EQ(h->recording()->tokens[t], a.records[t].token_id);
    EXPECT_EQ(a.records[t].position, t);
  }
  h->updateAllViews();
  for (hl::views::InstrumentView* v : h->views()) EXPECT_EQ(v->state().a, &a) << v->viewId().toStdString();
  expectRank1Series(h->view("rank1"), a, 6, 8);
  EXPECT_TRUE(h->findChild<QLabel*>("speedLabel")->text().contains("tokens/s"));
  EXPECT_TRUE(h.errors.isEmpty()) << h.errors.join('\n').toStdString();
}

TEST(MainWindow, ClickingAnEarlierToken_ScrubsEveryView) {
  Harness h;
  ASSERT_TRUE(h.load(demoDir()));
  ignoreEos(h);
  ASSERT_TRUE(h.step(8));
  const hl::Run& a = *h->runA();
  // A click on chip 2 of the strip.
  QWidget* canvas = h->tokenStrip()->canvas();
  const QPoint p = h->tokenStrip()->chipRect(2).center();
  QMouseEvent press(QEvent::MouseButtonPress, p, canvas->mapToGlobal(p), Qt::LeftButton, Qt::LeftButton,
                    Qt::NoModifier);
  QApplication::sendEvent(canvas, &press);
  EXPECT_EQ(h->currentStep(), 2);
  EXPECT_EQ(h->tokenStrip()->current(), 2);
  h->updateAllViews();
  for (hl::views::InstrumentView* v : h->views()) {
    EXPECT_EQ(v->state().step, 2) << v->viewId().toStdString();
  }
  expectRank1Series(h->view("rank1"), a, 2, 8);
  // Alt+Left / Ctrl+End are actions of the Run menu.
  auto* runMenu = h->menuBar()->actions()[1]->menu();
  for (QAction* act : runMenu->actions()) {
    if (act->shortcuts().contains(QKeySequence(Qt::ALT | Qt::Key_Left))) act->trigger();
  }
  EXPECT_EQ(h->currentStep(), 1);
  h->scrubTo(-1);
  EXPECT_EQ(h->currentStep(), 7);
  // Stepping follows the new token again.
  QAction* stepAction = h->findChild<QAction*>("actionStep");
  EXPECT_TRUE(stepAction->shortcuts().contains(QKeySequence(Qt::Key_F10)));
  h->scrubTo(3);
  bool idle = false;
  auto c = QObject::connect(h.w.get(), &hl::app::MainWindow::idle, [&] { idle = true; });
  stepAction->trigger();
  ASSERT_TRUE(waitFor([&] { return idle; }));
  QObject::disconnect(c);
  EXPECT_EQ(h->currentStep(), 8);
  // Clicking a layer in a view selects it everywhere.
  h->selectLayer(2);
  h->updateAllViews();
  for (hl::views::InstrumentView* v : h->views()) EXPECT_EQ(v->state().layer, 2);
}

TEST(MainWindow, ToggleNormalizer_RerunsTheSameTokensAsRunB_ThatStepsAlong) {
  Harness h;
  ASSERT_TRUE(h.load(demoDir()));
  ignoreEos(h);
  ASSERT_TRUE(h.step(6));
  EXPECT_EQ(h->runB(), nullptr);
  ASSERT_TRUE(toggle(h, [](hl::app::Toggles& t) {
    t.normalizerOverride = true;
    t.normalizer = hl::Normalizer::Softmax1;
  }));
  const hl::Run* b = h->runB();
  ASSERT_NE(b, nullptr);
  const hl::Run& a = *h->runA();
  ASSERT_EQ(b->records.size(), a.records.size());
  EXPECT_TRUE(b->settings.normalizer_override);
  EXPECT_EQ(b->settings.normalizer, hl::Normalizer::Softmax1);
  bool differs = false;
  for (size_t i = 0; i < a.records.size(); ++i) {
    EXPECT_EQ(b->records[i].token_id, a.records[i].token_id);
    differs = differs || b->records[i].attn_mass != a.records[i].attn_mass;
  }
  EXPECT_TRUE(differs) << "softmax-1 should change the attention mass";
  ASSERT_TRUE(h.step(2));
  ASSERT_EQ(h->runA()->records.size(), 8u);
  ASSERT_EQ(h->runB()->records.size(), 8u);
  EXPECT_EQ(h->runB()->records[7].token_id, h->runA()->records[7].token_id);
  h->updateAllViews();
  for (hl::views::InstrumentView* v : h->views()) EXPECT_EQ(v->state().b, h->runB()) << v->viewId().toStdString();
  EXPECT_NE(h->view("rank1")->graph("depth B"), nullptr);
  h->setShowDiff(true);
  EXPECT_TRUE(h->view("rank1")->figureTitle().contains(QStringLiteral("B − A")));
  EXPECT_NE(h->view("rank1")->graph("depth B-A"), nullptr);
  h->setShowDiff(false);
  // Back to run A's settings: no run B.
  ASSERT_TRUE(toggle(h, [](hl::app::Toggles& t) { t.normalizerOverride = false; }));
  EXPECT_EQ(h->runB(), nullptr);
  EXPECT_TRUE(h.errors.isEmpty()) << h.errors.join('\n').toStdString();
}

TEST(MainWindow, Adapter_FillsTheDoraView_AndItsToggleRerunsAsRunB) {
  TempDir tmp("adapter");
  writeDoraAdapter(tmp.path / "dora");
  Harness h;
  ASSERT_TRUE(h.load(demoDir()));
  ignoreEos(h);
  ASSERT_TRUE(h.step(5));
  EXPECT_FALSE(h->view("dora")->hasData());
  bool loaded = false;
  auto c = QObject::connect(h.w.get(), &hl::app::MainWindow::adapterLoaded, [&] { loaded = true; });
  h->loadAdapter(tmp.q("dora"));
  ASSERT_TRUE(waitFor([&] { return loaded || !h.errors.isEmpty(); })) << h.errors.join('\n').toStdString();
  QObject::disconnect(c);
  ASSERT_TRUE(loaded) << h.errors.join('\n').toStdString();
  ASSERT_EQ(h->doraRows().size(), 2u);
  for (const hl::DoraRow& r : h->doraRows()) EXPECT_GT(r.delta_m, 0.0) << r.module;
  h->updateAllViews();
  EXPECT_TRUE(h->view("dora")->hasData());
  ASSERT_TRUE(toggle(h, [](hl::app::Toggles& t) { t.adapter = true; }));
  const hl::Run* b = h->runB();
  ASSERT_NE(b, nullptr);
  EXPECT_FALSE(b->settings.adapter.empty());
  ASSERT_EQ(b->records.size(), 5u);
  EXPECT_NE(b->records[4].logits, h->runA()->records[4].logits);
  EXPECT_FALSE(h->recording()->adapter_identity.empty());
  EXPECT_TRUE(h.errors.isEmpty()) << h.errors.join('\n').toStdString();
}

TEST(MainWindow, ExportAll_WritesEveryViewAsValidPngSvgPdfAndCsv) {
  Harness h;
  ASSERT_TRUE(h.load(demoDir()));
  ignoreEos(h);
  ASSERT_TRUE(h.step(6));
  TempDir out("export");
  hl::app::ExportOptions o;
  o.folder = out.q("figures");
  o.width = 800;
  o.height = 500;
  o.dpi = 120;
  const hl::app::ExportResult r = h->exportAll(o);
  EXPECT_TRUE(r.errors.isEmpty()) << r.errors.join('\n').toStdString();
  EXPECT_EQ(r.written.size(), 11 * 4);
  for (hl::views::InstrumentView* v : h->views()) {
    const std::string id = v->viewId().toStdString();
    const QImage png(o.folder + "/" + v->viewId() + ".png");
    ASSERT_FALSE(png.isNull()) << id;
    EXPECT_EQ(png.size(), QSize(800, 500)) << id;
    QFile svg(o.folder + "/" + v->viewId() + ".svg");
    ASSERT_TRUE(svg.open(QIODevice::ReadOnly)) << id;
    EXPECT_TRUE(svg.readAll().contains("<svg")) << id;
    QFile pdf(o.folder + "/" + v->viewId() + ".pdf");
    ASSERT_TRUE(pdf.open(QIODevice::ReadOnly)) << id;
    const QByteArray pdfBytes = pdf.readAll();
    EXPECT_TRUE(pdfBytes.startsWith("%PDF-")) << id;
    EXPECT_TRUE(pdfBytes.trimmed().endsWith("%%EOF")) << id;
    QFile csv(o.folder + "/" + v->viewId() + ".csv");
    ASSERT_TRUE(csv.open(QIODevice::ReadOnly)) << id;
    EXPECT_GT(csv.size(), 0) << id;
  }
}

TEST(MainWindow, BadCheckpoint_ErrorNamesFileAndTensor_PreviousModelStaysUsable) {
  Harness h;
  ASSERT_TRUE(h.load(demoDir()));
  ignoreEos(h);
  ASSERT_TRUE(h.step(3));
  TempDir bad("bad");
  // The same weights under a config whose feed-forward width disagrees with them.
  hl::test::fs::copy(demo().path / "demo-random", bad.path / "ckpt", hl::test::fs::copy_options::recursive);
  hl::JambaConfig c = hl::load_config_file((bad.path / "ckpt" / "config.json").string());
  c.intermediate_size *= 2;
  std::ofstream((bad.path / "ckpt" / "config.json").string()) << hl::config_to_json(c);
  bool failed = false;
  auto conn = QObject::connect(h.w.get(), &hl::app::MainWindow::loadFailed, [&] { failed = true; });
  ASSERT_TRUE(h->openCheckpoint(bad.q("ckpt")));
  ASSERT_TRUE(waitFor([&] { return failed; }));
  QObject::disconnect(conn);
  ASSERT_EQ(h.errors.size(), 1);
  const QString e = h.errors[0];
  EXPECT_TRUE(e.startsWith("Could not open checkpoint")) << e.toStdString();
  EXPECT_TRUE(e.contains("model.safetensors")) << e.toStdString();
  EXPECT_TRUE(e.contains("tensor")) << e.toStdString();
  EXPECT_TRUE(e.contains("still loaded")) << e.toStdString();
  // The previous model and its run carry on.
  EXPECT_EQ(h->modelInfo()->dir, demoDir());
  EXPECT_EQ(h.records(), 3u);
  ASSERT_TRUE(h.step(2));
  EXPECT_EQ(h.records(), 5u);
}

// File > Open GGUF file… ends in openCheckpoint(file): the model loads from the file, the prompt is
// tokenized by the file's own tokenizer and steps run.
TEST(MainWindow, OpensAGgufFile_TokenizesWithItsVocabulary_AndSteps) {
  Harness h;
  const QString file = QStringLiteral(HL_GGUF_FIXTURES "/jamba-gqa_basic-Q4_K_M.gguf");
  h->runPanel()->setIdsMode(false);
  h->runPanel()->setPromptText(QStringLiteral("the cat"));
  bool started = false;
  auto c = QObject::connect(h.w.get(), &hl::app::MainWindow::runStarted, [&] { started = true; });
  ASSERT_TRUE(h->openCheckpoint(file));
  ASSERT_TRUE(waitFor([&] { return started; })) << h.errors.join("; ").toStdString();
  QObject::disconnect(c);
  ASSERT_TRUE(h.settle());
  EXPECT_TRUE(h.errors.isEmpty()) << h.errors.join("; ").toStdString();
  EXPECT_EQ(h->modelInfo()->dir, file);
  EXPECT_EQ(h->modelInfo()->config.vocab_size, 96);
  ASSERT_TRUE(h.step(3));
  EXPECT_GE(h.records(), 3u);
}

TEST(MainWindow, CancelLoad_LeavesNoModel_ThenLoadWorks) {
  Harness h;
  bool failed = false;
  auto conn = QObject::connect(h.w.get(), &hl::app::MainWindow::loadFailed, [&] { failed = true; });
  ASSERT_TRUE(h->openCheckpoint(demoDir()));
  EXPECT_TRUE(h->isLoading());
  EXPECT_FALSE(h->openCheckpoint(demoDir()));  // one load at a time
  h->cancelLoad();
  ASSERT_TRUE(waitFor([&] { return failed; }));
  QObject::disconnect(conn);
  EXPECT_FALSE(h->hasModel());
  EXPECT_TRUE(h.errors.isEmpty());  // a cancel is not an error
  ASSERT_TRUE(h.load(demoDir()));
  EXPECT_TRUE(h->hasModel());
}

TEST(MainWindow, RunToEnd_StaysResponsive_AndStopEndsItAtATokenBoundary) {
  Harness h;
  ASSERT_TRUE(h.load(demoDir()));
  ignoreEos(h);
  h->runPanel()->findChild<QSpinBox*>("maxNewTokens")->setValue(100000);
  int ticks = 0;
  QTimer timer;
  QObject::connect(&timer, &QTimer::timeout, [&] { ++ticks; });
  timer.start(5);
  bool idle = false;
  auto c = QObject::connect(h.w.get(), &hl::app::MainWindow::idle, [&] { idle = true; });
  ASSERT_TRUE(h->stepRun(-1));
  EXPECT_TRUE(h->isBusy());
  EXPECT_FALSE(h->stepRun(1));  // one command at a time
  // The GUI thread keeps running its timers while the engine steps: a 5 ms timer ticks during the
  // run (a blocked GUI thread would time this wait out). Not "ticks within the first 12 tokens": a
  // fast CPU makes those in well under 5 ms.
  ASSERT_TRUE(waitFor([&] { return h.records() >= 12 && ticks > 0; }));
  EXPECT_TRUE(h->isBusy()) << "the run ended after " << h.records() << " records (max new tokens set after the load)";
  h->stopRun();
  ASSERT_TRUE(waitFor([&] { return idle; }));
  QObject::disconnect(c);
  const size_t n = h.records();
  EXPECT_LT(n, 1000u);
  EXPECT_EQ(h->tokenStrip()->fedCount(), static_cast<int>(n));
  ASSERT_TRUE(h.step(1));
  EXPECT_EQ(h.records(), n + 1);
}

TEST(MainWindow, DroppedFolder_Opens_AndDemoMenuOffersBundledModelsAndFineTunes) {
  // A bundled-models folder as the trainer lays it out: baseline and finetunes/<method>/step-N.
  TempDir tmp("bundled");
  hl::test::fs::create_directories(tmp.path / "models");
  hl::test::fs::copy(demo().path / "demo-random", tmp.path / "models" / "baseline",
                     hl::test::fs::copy_options::recursive);
  writeDoraAdapter(tmp.path / "models" / "finetunes" / "dora" / "step-10");
  const std::unique_ptr<Harness> owner = harnessWithModels(tmp.path / "models");
  Harness& h = *owner;
  QMenu* demoMenu = demoMenuOf(h);
  ASSERT_NE(demoMenu, nullptr);
  QAction* step10 = nullptr;
  QStringList names;
  std::function<void(QMenu*)> walk = [&](QMenu* m) {
    for (QAction* a : m->actions()) {
      if (a->menu()) walk(a->menu());
      names << a->text();
      if (a->text().startsWith("step-10")) step10 = a;
    }
  };
  walk(demoMenu);
  EXPECT_TRUE(names.contains("baseline")) << names.join(", ").toStdString();
  ASSERT_NE(step10, nullptr) << names.join(", ").toStdString();
  // One click: the base opens, then its adapter loads.
  bool adapter = false;
  auto c = QObject::connect(h.w.get(), &hl::app::MainWindow::adapterLoaded, [&] { adapter = true; });
  step10->trigger();
  ASSERT_TRUE(waitFor([&] { return adapter || !h.errors.isEmpty(); }));
  QObject::disconnect(c);
  EXPECT_TRUE(h.errors.isEmpty()) << h.errors.join('\n').toStdString();
  EXPECT_EQ(h->modelInfo()->name, QString("baseline"));
  EXPECT_EQ(h->doraRows().size(), 2u);
  ASSERT_TRUE(h.settle());

  // Dropping a checkpoint folder on the window opens it.
  QMimeData mime;
  mime.setUrls({QUrl::fromLocalFile(demoDir())});
  QDragEnterEvent enter(QPoint(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(h.w.get(), &enter);
  EXPECT_TRUE(enter.isAccepted());
  bool loaded = false;
  c = QObject::connect(h.w.get(), &hl::app::MainWindow::modelLoaded, [&] { loaded = true; });
  QDropEvent drop(QPointF(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(h.w.get(), &drop);
  ASSERT_TRUE(waitFor([&] { return loaded; }));
  QObject::disconnect(c);
  EXPECT_EQ(h->modelInfo()->dir, demoDir());
  EXPECT_TRUE(hl::app::recentList(hl::app::kRecentCheckpoints).contains(demoDir()));
}

TEST(MainWindow, DarkTheme_PersistsInSettings) {
  {
    Harness h;
    h->setDarkTheme(true);
    EXPECT_TRUE(h->view("entropy")->isDark());
  }
  EXPECT_TRUE(QSettings().value("ui/dark").toBool());
  Harness h2;
  EXPECT_TRUE(h2->darkTheme());
  h2->setDarkTheme(false);
  EXPECT_FALSE(h2->view("entropy")->isDark());
}

int main(int argc, char** argv) {
  ::setenv("QT_QPA_PLATFORM", "offscreen", 1);
  QStandardPaths::setTestModeEnabled(true);  // settings and autosaves in a test location
  QApplication app(argc, argv);
  // One settings file and autosave folder per process: ctest runs tests in parallel processes.
  QCoreApplication::setOrganizationName("HybridLensTests");
  QCoreApplication::setApplicationName(QStringLiteral("hl_gui_tests_%1").arg(::getpid()));
  QSettings().clear();
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  const QString settingsFile = QSettings().fileName();
  QFile::remove(settingsFile);
  QDir(QStandardPaths::writableLocation(QStandardPaths::AppLocalDataLocation)).removeRecursively();
  return rc;
}
