// Sessions in the real main window, offscreen (issue 6 items 2, 4, 5): Save / Open round trip that
// continues stepping with the checkpoint present, view-only without it (scrub and export still
// work), autosave while stepping and recovery after a crash, the unsaved-work question, and the
// token-aligned compare of two sessions.
#include <gtest/gtest.h>

#include <QCheckBox>
#include <QFileInfo>
#include <QSettings>

#include "app/app_settings.h"
#include "app/run_panel.h"
#include "app/token_strip.h"
#include "gui_test_util.h"
#include "sessions/session_file.h"
#include "views/instrument_view.h"

using namespace hl::test;  // Harness, TempDir, waitFor, demoDir, ignoreEos, fs, ...

namespace {

// Opens a session and waits until it is either stepping again or settled as view-only.
bool open(Harness& h, const QString& path, bool* canStep) {
  bool resumed = false;
  auto c = QObject::connect(h.w.get(), &hl::app::MainWindow::sessionResumed, [&](bool ok) {
    resumed = true;
    *canStep = ok;
  });
  const bool ok = h->openSession(path) && waitFor([&] { return resumed || !h.errors.isEmpty(); });
  QObject::disconnect(c);
  return ok && resumed && h.settle();
}

bool toggleRegisters(Harness& h, int n) {
  return toggle(h, [n](hl::app::Toggles& t) { t.registers = n; }) && h->runB() != nullptr;
}

}  // namespace

TEST(Sessions, SaveThenOpen_RoundTripsBitExact_AndContinuesStepping) {
  TempDir tmp("roundtrip");
  const QString file = tmp.q("run.hlsession");
  hl::RecordList recordsA;  // shared with the first window's run, not copied
  {
    Harness h;
    ASSERT_TRUE(h.load(demoDir()));
    ignoreEos(h);
    ASSERT_TRUE(h.step(6));
    ASSERT_TRUE(toggleRegisters(h, 2));
    EXPECT_TRUE(h->isDirty());
    ASSERT_TRUE(save(h, file)) << h.errors.join('\n').toStdString();
    EXPECT_FALSE(h->isDirty());
    EXPECT_EQ(h->sessionPath(), file);
    EXPECT_TRUE(hl::app::recentList(hl::app::kRecentSessions).contains(file));
    recordsA = h->runA()->records;
  }
  Harness h;
  bool canStep = false;
  ASSERT_TRUE(open(h, file, &canStep)) << h.errors.join('\n').toStdString();
  EXPECT_TRUE(canStep);
  EXPECT_FALSE(h->isViewOnly());
  ASSERT_NE(h->recording(), nullptr);
  ASSERT_EQ(h->recording()->runs.size(), 2u);
  const hl::Run& a = *h->runA();
  ASSERT_EQ(a.records.size(), recordsA.size());
  for (size_t t = 0; t < recordsA.size(); ++t) {
    EXPECT_EQ(a.records[t].token_id, recordsA[t].token_id);
    EXPECT_EQ(a.records[t].logits, recordsA[t].logits) << "token " << t;  // F32: bit-exact
    EXPECT_EQ(a.records[t].rank1_distance, recordsA[t].rank1_distance) << "token " << t;
  }
  EXPECT_EQ(h->runB()->settings.registers, 2);
  EXPECT_EQ(h->tokenStrip()->fedCount(), 6);
  EXPECT_EQ(h->runPanel()->toggles().registers, 2);
  // With the checkpoint present, stepping continues both runs.
  ASSERT_TRUE(h.step(2));
  EXPECT_EQ(h->runA()->records.size(), 8u);
  EXPECT_EQ(h->runB()->records.size(), 8u);
  EXPECT_TRUE(h->isDirty());
  EXPECT_TRUE(h.errors.isEmpty()) << h.errors.join('\n').toStdString();
}

TEST(Sessions, WithoutItsCheckpoint_OpensViewOnly_ScrubsAndExports) {
  TempDir tmp("viewonly");
  fs::copy(demo().path / "demo-random", tmp.path / "gone", fs::copy_options::recursive);
  const QString file = tmp.q("viewonly.hlsession");
  {
    Harness h;
    ASSERT_TRUE(h.load(tmp.q("gone")));
    ignoreEos(h);
    ASSERT_TRUE(h.step(5));
    ASSERT_TRUE(save(h, file));
  }
  fs::remove_all(tmp.path / "gone");
  Harness h;
  bool canStep = true;
  ASSERT_TRUE(open(h, file, &canStep));
  EXPECT_FALSE(canStep);
  EXPECT_TRUE(h->isViewOnly());
  EXPECT_FALSE(h->canStep());
  EXPECT_FALSE(h->stepRun(1));
  ASSERT_EQ(h->runA()->records.size(), 5u);
  h->scrubTo(1);
  h->updateAllViews();
  for (hl::views::InstrumentView* v : h->views()) EXPECT_EQ(v->state().step, 1) << v->viewId().toStdString();
  hl::app::ExportOptions o;
  o.folder = tmp.q("figs");
  o.svg = o.pdf = false;
  const hl::app::ExportResult r = h->exportAll(o);
  EXPECT_TRUE(r.errors.isEmpty()) << r.errors.join('\n').toStdString();
  EXPECT_EQ(r.written.size(), 22);
  EXPECT_TRUE(QFileInfo::exists(o.folder + "/rank1.png"));
}

TEST(Sessions, AutosaveWhileStepping_RecoversAfterACrash) {
  TempDir tmp("autosave");
  std::vector<int32_t> tokens;
  {
    Harness h;
    h->setAutosaveInterval(50);
    ASSERT_TRUE(h.load(demoDir()));
    ignoreEos(h);
    ASSERT_TRUE(h.step(5));
    ASSERT_TRUE(waitFor([&] { return h->hasAutosave(); }));
    EXPECT_FALSE(h->hasRecovery());  // its own live autosave is not offered
    ASSERT_TRUE(h.settle());
    tokens = h->recording()->tokens;
    // A crash: the window goes away without closing (no closeEvent, no clean shutdown).
  }
  Harness h;
  ASSERT_TRUE(h->hasRecovery());
  bool opened = false;
  auto c = QObject::connect(h.w.get(), &hl::app::MainWindow::sessionOpened, [&] { opened = true; });
  ASSERT_TRUE(h->recoverAutosave());
  ASSERT_TRUE(waitFor([&] { return opened; }));
  QObject::disconnect(c);
  ASSERT_TRUE(h.settle());
  ASSERT_NE(h->recording(), nullptr);
  EXPECT_GE(h->recording()->tokens.size(), 1u);
  EXPECT_LE(h->recording()->tokens.size(), tokens.size());
  for (size_t i = 0; i < h->recording()->tokens.size(); ++i) EXPECT_EQ(h->recording()->tokens[i], tokens[i]);
  EXPECT_TRUE(h->isDirty());                // recovered work is unsaved
  EXPECT_TRUE(h->sessionPath().isEmpty());  // Save asks where
  h.answer = QMessageBox::Discard;
  h->close();
  EXPECT_FALSE(h->hasRecovery());  // a clean exit removes the autosave
}

TEST(Sessions, UnsavedWork_IsAskedAboutBeforeItIsDiscarded) {
  TempDir tmp("discard");
  Harness h;
  ASSERT_TRUE(h.load(demoDir()));
  ignoreEos(h);
  ASSERT_TRUE(h.step(2));
  ASSERT_TRUE(h->isDirty());
  h.answer = QMessageBox::Cancel;
  EXPECT_FALSE(h->resetRun());
  EXPECT_FALSE(h->openCheckpoint(demoDir()));
  EXPECT_FALSE(h->close());
  EXPECT_EQ(h.asked, 3);
  EXPECT_EQ(h.records(), 2u);
  // Save: with a session path the answer saves there, synchronously.
  ASSERT_TRUE(save(h, tmp.q("kept.hlsession")));
  ASSERT_TRUE(h.step(1));
  h.answer = QMessageBox::Save;
  bool started = false;
  auto c = QObject::connect(h.w.get(), &hl::app::MainWindow::runStarted, [&] { started = true; });
  EXPECT_TRUE(h->resetRun());
  ASSERT_TRUE(waitFor([&] { return started; }));
  QObject::disconnect(c);
  EXPECT_EQ(h.records(), 0u);
  EXPECT_EQ(hl::load_session(tmp.path.string() + "/kept.hlsession").runs[0].records.size(), 3u);
}

TEST(Sessions, CompareTwoSessions_OverlaysTokenAligned) {
  TempDir tmp("compare");
  const QString x = tmp.q("x.hlsession"), y = tmp.q("y.hlsession");
  {
    Harness h;
    ASSERT_TRUE(h.load(demoDir()));
    ignoreEos(h);
    ASSERT_TRUE(h.step(7));
    ASSERT_TRUE(save(h, x));
  }
  {
    Harness h;
    hl::app::Toggles t;
    t.normalizerOverride = true;
    t.normalizer = hl::Normalizer::Softmax1;
    h->runPanel()->setToggles(t);  // run A of this session uses softmax-1
    ASSERT_TRUE(h.load(demoDir()));
    ignoreEos(h);
    ASSERT_TRUE(h.step(7));
    EXPECT_TRUE(h->runA()->settings.normalizer_override);
    ASSERT_TRUE(save(h, y));
  }
  Harness h;
  bool canStep = false;
  ASSERT_TRUE(open(h, x, &canStep));
  bool changed = false;
  auto c = QObject::connect(h.w.get(), &hl::app::MainWindow::compareChanged, [&] { changed = true; });
  ASSERT_TRUE(h->compareWithSession(y));
  ASSERT_TRUE(waitFor([&] { return changed; }));
  QObject::disconnect(c);
  const hl::Run* b = h->runB();
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(b->settings.normalizer_override);
  ASSERT_GE(b->records.size(), 4u);  // at least the common prompt
  ASSERT_LE(b->records.size(), 7u);
  for (size_t t = 0; t < b->records.size(); ++t) EXPECT_EQ(b->records[t].token_id, h->recording()->tokens[t]);
  h->updateAllViews();
  for (hl::views::InstrumentView* v : h->views()) EXPECT_EQ(v->state().b, b) << v->viewId().toStdString();
  h->endSessionCompare();
  EXPECT_EQ(h->runB(), nullptr);
  EXPECT_TRUE(h.errors.isEmpty()) << h.errors.join('\n').toStdString();
}

namespace {

// File > Weights on load: the open checkpoint reloads quantised, the status bar says what changed,
// and the run's recording (and so its session) names the format; the LM head option reloads with
// +head; "As stored" goes back.
TEST(MainWindow, WeightsOnLoad_ReloadsQuantised_AndTheRecordingNamesTheFormat) {
  Harness h;
  ASSERT_TRUE(h.load(demoDir()));
  EXPECT_TRUE(h->modelInfo()->weights.isEmpty());
  QAction* q8 = h->findChild<QAction*>("actionWeights_q8_0");
  ASSERT_NE(q8, nullptr);
  bool started = false;
  auto c = QObject::connect(h.w.get(), &hl::app::MainWindow::runStarted, [&] { started = true; });
  q8->trigger();
  ASSERT_TRUE(waitFor([&] { return started && h->modelInfo() && h->modelInfo()->weights == "q8_0"; }))
      << h.errors.join("; ").toStdString();
  QObject::disconnect(c);
  ASSERT_TRUE(h.settle());
  EXPECT_TRUE(h.errors.isEmpty()) << h.errors.join("; ").toStdString();
  EXPECT_TRUE(h->modelInfo()->quantSummary.contains("q8_0")) << h->modelInfo()->quantSummary.toStdString();
  ASSERT_TRUE(h.step(2));
  ASSERT_NE(h->recording(), nullptr);
  EXPECT_EQ(h->recording()->weights, "q8_0");
  // "Quantise the LM head too": the same format with +head, the head among the quantised matrices.
  started = false;
  c = QObject::connect(h.w.get(), &hl::app::MainWindow::runStarted, [&] { started = true; });
  h->findChild<QAction*>("actionWeightsHead")->trigger();
  ASSERT_TRUE(waitFor([&] { return started && h->modelInfo() && h->modelInfo()->weights == "q8_0+head"; }))
      << h.errors.join("; ").toStdString();
  QObject::disconnect(c);
  ASSERT_TRUE(h.settle());
  EXPECT_TRUE(h->modelInfo()->quantSummary.contains("q8_0+head")) << h->modelInfo()->quantSummary.toStdString();
  // "Keep activations in fp32": the same weights, x not rounded to 8 bits; the run names it.
  QAction* fp32 = h->findChild<QAction*>("actionWeightsFp32Activations");
  ASSERT_NE(fp32, nullptr);
  started = false;
  c = QObject::connect(h.w.get(), &hl::app::MainWindow::runStarted, [&] { started = true; });
  fp32->trigger();
  ASSERT_TRUE(waitFor([&] { return started && h->modelInfo() && h->modelInfo()->weights == "q8_0+head+fp32-activations"; }))
      << h.errors.join("; ").toStdString();
  QObject::disconnect(c);
  ASSERT_TRUE(h.settle());
  ASSERT_TRUE(h.step(1));
  EXPECT_EQ(h->recording()->weights, "q8_0+head+fp32-activations");
  started = false;
  c = QObject::connect(h.w.get(), &hl::app::MainWindow::runStarted, [&] { started = true; });
  fp32->trigger();  // back to the int8 products
  ASSERT_TRUE(waitFor([&] { return started && h->modelInfo() && h->modelInfo()->weights == "q8_0+head"; }))
      << h.errors.join("; ").toStdString();
  QObject::disconnect(c);
  ASSERT_TRUE(h.settle());
  started = false;
  c = QObject::connect(h.w.get(), &hl::app::MainWindow::runStarted, [&] { started = true; });
  h->findChild<QAction*>("actionWeightsAsStored")->trigger();
  ASSERT_TRUE(waitFor([&] { return started && h->modelInfo() && h->modelInfo()->weights.isEmpty(); }))
      << h.errors.join("; ").toStdString();
  QObject::disconnect(c);
  ASSERT_TRUE(h.settle());
}

}  // namespace
