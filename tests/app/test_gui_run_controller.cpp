// The run controller without a main window (issue 17 item 1): an EngineThread, an InspectorContext
// and a RunController on demo-random — start run A, step it, make a compare run from a toggle that
// then steps along with A, notice an edited prompt, reopen the recording view-only and resume it.
// Checks the records the context ends up with, not the signals' order alone.
#include <gtest/gtest.h>

#include <vector>

#include "app/engine_thread.h"
#include "app/engine_worker.h"
#include "app/inspector_context.h"
#include "app/run_controller.h"
#include "gui_test_util.h"

using namespace hl::test;  // waitFor, demoDir

namespace {

using hl::app::EngineWorker;
using hl::app::ModelInfo;
using hl::app::PromptKey;
using hl::app::RunController;
using hl::app::Toggles;

struct Rig {
  hl::app::EngineThread engine;
  hl::app::InspectorContext ctx;
  RunController ctl{&engine, &ctx};
  QStringList errors;
  int idles = 0, started = 0, resumed = 0;
  QString resumeError;
  Rig() {
    QObject::connect(&ctl, &RunController::errorReported, [this](const QString& t, const QString& m) { errors << t + ": " + m; });
    QObject::connect(&ctl, &RunController::idle, [this] { ++idles; });
    QObject::connect(&ctl, &RunController::started, [this] { ++started; });
    QObject::connect(&ctl, &RunController::resumed, [this](const QString& e) {
      ++resumed;
      resumeError = e;
    });
  }
  // Loads `dir` on the engine thread and hands the model to the controller, as the main window does.
  bool load(const QString& dir) {
    bool done = false;
    auto c = QObject::connect(engine.worker(), &EngineWorker::modelLoaded, &ctl, [&](const ModelInfo& info) {
      ctl.setModel(info);
      done = true;
    });
    engine.post([dir, epoch = engine.cancelEpoch()](EngineWorker& w) { w.loadModel(1, epoch, dir); });
    const bool ok = waitFor([&] { return done; });
    QObject::disconnect(c);
    return ok;
  }
  bool settleIdle(int n) {
    return waitFor([&] { return idles >= n && !ctl.isBusy(); });
  }
};

hl::app::RunRequest idsRequest(std::vector<int32_t> ids) {
  hl::app::RunRequest r;
  r.useText = false;
  r.ids = std::move(ids);
  r.sampling.ignore_eos = true;  // n steps give n tokens
  r.maxNewTokens = 64;
  return r;
}

}  // namespace

TEST(RunController, StartStepCompare_RecordsGrowInTheContext) {
  Rig g;
  ASSERT_TRUE(g.load(demoDir()));
  g.ctl.newRecording();
  ASSERT_NE(g.ctx.recording(), nullptr);
  EXPECT_TRUE(g.ctx.recording()->runs.empty());
  EXPECT_FALSE(g.ctl.canStep());  // no run A yet

  const PromptKey key{QStringLiteral("1, 5, 9, 13"), true};
  ASSERT_TRUE(g.ctl.start(idsRequest({1, 5, 9, 13}), key, Toggles{}));
  EXPECT_TRUE(g.ctl.isBusy());
  EXPECT_FALSE(g.ctl.start(idsRequest({2}), key, Toggles{}));  // one command at a time
  ASSERT_TRUE(waitFor([&] { return g.started == 1 && !g.ctl.isBusy(); }));
  EXPECT_EQ(g.ctl.pending().tokens, (std::vector<int32_t>{1, 5, 9, 13}));
  ASSERT_NE(g.ctx.runA(), nullptr);
  EXPECT_TRUE(g.ctx.runA()->records.empty());
  EXPECT_TRUE(g.ctl.canStep());
  EXPECT_FALSE(g.ctl.promptDiffers(key));
  EXPECT_TRUE(g.ctl.promptDiffers({QStringLiteral("7, 8"), true}));

  ASSERT_TRUE(g.ctl.step(6));
  ASSERT_TRUE(g.settleIdle(1));
  const hl::Recording* r = g.ctx.recording();
  ASSERT_EQ(g.ctx.runA()->records.size(), 6u);
  EXPECT_EQ(g.ctx.runA()->prompt_tokens, 4);
  ASSERT_EQ(r->tokens.size(), 6u);
  EXPECT_EQ(std::vector<int32_t>(r->tokens.begin(), r->tokens.begin() + 4), (std::vector<int32_t>{1, 5, 9, 13}));
  EXPECT_TRUE(g.ctl.isDirty());

  // A toggle that differs from A: a compare run B re-runs A's 6 tokens, then steps along with A.
  const Toggles base = hl::app::togglesOf(g.ctx.runA()->settings);
  Toggles t = base;
  t.normalizerOverride = true;
  t.normalizer = hl::Normalizer::Softmax1;
  g.ctl.togglesChanged(t);
  EXPECT_TRUE(g.ctl.isComparing());
  ASSERT_TRUE(g.settleIdle(2));
  ASSERT_EQ(r->runs.size(), 2u);
  EXPECT_EQ(r->runs[1].label, "B");
  EXPECT_EQ(r->runs[1].records.size(), 6u);
  EXPECT_TRUE(r->runs[1].settings.normalizer_override);
  EXPECT_EQ(g.ctx.compareIndex(), 1);
  EXPECT_TRUE(g.ctl.summary().contains(QStringLiteral("B: normalizer")));
  ASSERT_TRUE(g.ctl.step(2));
  ASSERT_TRUE(g.settleIdle(3));
  EXPECT_EQ(r->runs[0].records.size(), 8u);
  EXPECT_EQ(r->runs[1].records.size(), 8u);

  // Back to A's toggles: no compare run, and the runs stay.
  g.ctl.togglesChanged(base);
  EXPECT_EQ(g.ctx.compareIndex(), -1);
  EXPECT_EQ(r->runs.size(), 2u);
  EXPECT_TRUE(g.errors.isEmpty()) << g.errors.join('\n').toStdString();
}

TEST(RunController, StoredRecording_IsViewOnlyUntilResumed_ThenSteps) {
  Rig g;
  ASSERT_TRUE(g.load(demoDir()));
  g.ctl.newRecording();
  ASSERT_TRUE(g.ctl.start(idsRequest({3, 4, 5}), {QStringLiteral("3, 4, 5"), true}, Toggles{}));
  ASSERT_TRUE(waitFor([&] { return g.started == 1 && !g.ctl.isBusy(); }));
  ASSERT_TRUE(g.ctl.step(5));
  ASSERT_TRUE(g.settleIdle(1));

  g.ctl.markSaved(g.ctl.changes());
  auto stored = std::make_shared<hl::Recording>(*g.ctx.snapshot());
  g.ctl.openStored(stored, false);
  EXPECT_TRUE(g.ctl.isViewOnly());
  EXPECT_FALSE(g.ctl.canStep());
  EXPECT_FALSE(g.ctl.step(1));
  EXPECT_FALSE(g.ctl.isDirty());  // opened from disk: nothing to lose
  EXPECT_EQ(g.ctx.runA()->records.size(), 5u);

  g.ctl.resume(QStringLiteral("auto"));
  ASSERT_TRUE(waitFor([&] { return g.resumed == 1 && !g.ctl.isBusy(); }));
  EXPECT_TRUE(g.resumeError.isEmpty()) << g.resumeError.toStdString();
  EXPECT_FALSE(g.ctl.isViewOnly());
  ASSERT_TRUE(g.ctl.step(2));
  ASSERT_TRUE(waitFor([&] { return g.ctx.runA()->records.size() == 7u && !g.ctl.isBusy(); }));
  EXPECT_TRUE(g.ctl.isDirty());

  // A recovered recording is unsaved work at once.
  g.ctl.openStored(std::make_shared<hl::Recording>(*g.ctx.snapshot()), true);
  EXPECT_TRUE(g.ctl.isDirty());
  EXPECT_TRUE(g.errors.isEmpty()) << g.errors.join('\n').toStdString();
}
