// The inspector context and the run logic in the real main window, offscreen (issue 17 items 1, 2
// and findings 1, 2, 4, 8, 14): the prompt box never disagrees with the run silently, views show
// the loaded model before any step and keep no stale labels, a session's adapter run ticks the
// adapter box, bad remembered settings are corrected once, records are shared and not copied, a
// closed recording gives its memory back, and views redraw only for the changes they draw from.
#include <gtest/gtest.h>
#include <unistd.h>

#include <QCheckBox>
#include <QFile>
#include <QSettings>
#include <fstream>
#include <functional>

#include "app/inspector_context.h"
#include "app/run_list.h"
#include "app/run_panel.h"
#include "engine/io/safetensors.h"
#include "gui_test_util.h"
#include "sessions/session_file.h"
#include "views/instrument_view.h"

using namespace hl::test;  // Harness, TempDir, waitFor, demoDir, ignoreEos, fs, ...

namespace {

bool openAndSettle(Harness& h, const QString& path) {
  bool resumed = false;
  auto c = QObject::connect(h.w.get(), &hl::app::MainWindow::sessionResumed, [&] { resumed = true; });
  const bool ok = h->openSession(path) && waitFor([&] { return resumed || !h.errors.isEmpty(); });
  QObject::disconnect(c);
  return ok && resumed && h.settle();
}

// Every text tick label of every axis of `v` (the row names "L2 attn", "key at query 51", ...).
QStringList textTicks(hl::views::InstrumentView* v) {
  QStringList out;
  for (QCPAxisRect* r : v->plot()->axisRects())
    for (QCPAxis* ax : r->axes())
      if (auto t = ax->ticker().dynamicCast<QCPAxisTickerText>())
        for (const QString& s : t->ticks()) out << s;
  return out;
}

double residentBytes() {
  std::ifstream f("/proc/self/statm");
  double pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * static_cast<double>(::sysconf(_SC_PAGESIZE));
}

}  // namespace

TEST(InspectorContext, EditedPrompt_IsMarked_AndStepRestartsTheRunWithIt) {
  // Finding 1: type a new prompt, press Step — the old prompt was fed until Reset.
  Harness h;
  ASSERT_TRUE(h.load(demoDir(), QStringLiteral("1, 5, 9, 13")));
  ASSERT_TRUE(h.step(2));
  EXPECT_TRUE(h->runPanel()->promptNote().isEmpty());
  h->runPanel()->setPromptText(QStringLiteral("7, 8"));
  EXPECT_FALSE(h->runPanel()->promptNote().isEmpty()) << "the window must say the box and the run differ";
  ASSERT_TRUE(h.step(1));
  ASSERT_EQ(h.records(), 1u);
  EXPECT_EQ(h->recording()->tokens[0], 7) << "Step fed the old prompt";
  EXPECT_TRUE(h->runPanel()->promptNote().isEmpty());
  // Typing the run's prompt back clears the note without a restart.
  h->runPanel()->setPromptText(QStringLiteral("1"));
  EXPECT_FALSE(h->runPanel()->promptNote().isEmpty());
  h->runPanel()->setPromptText(QStringLiteral("7, 8"));
  EXPECT_TRUE(h->runPanel()->promptNote().isEmpty());
  ASSERT_TRUE(h.step(1));
  EXPECT_EQ(h.records(), 2u);
  EXPECT_TRUE(h.errors.isEmpty()) << h.errors.join('\n').toStdString();
}

TEST(InspectorContext, BeforeTheFirstStep_ViewsShowTheModel_AndNoStaleLabelsAfterASwitch) {
  // Finding 2: "the model has no attention layer" before any step, old labels after a model
  // switch, "one block of 9" for an 8-layer model.
  TempDir tmp("schedule");
  hl::GenerateOptions g;
  g.config = hl::preset_config("demo-random");
  g.config.attn_layer_period = 9;  // longer than the model: one partial block
  g.config.attn_layer_offset = 3;
  hl::generate_checkpoint((tmp.path / "p9").string(), g);

  Harness h;
  ASSERT_TRUE(h.load(demoDir()));
  for (const char* id : {"entropy", "router", "ssm_delta"}) {
    const QString t = h->view(id)->figureTitle();
    EXPECT_FALSE(t.contains(QStringLiteral("has no"))) << id << ": " << t.toStdString();
    EXPECT_TRUE(t.contains(QStringLiteral("no tokens yet"))) << id << ": " << t.toStdString();
  }
  EXPECT_TRUE(h->view("ribbon")->hasData());
  ASSERT_TRUE(h.step(3));
  h->selectLayer(2);
  h->updateAllViews();
  ASSERT_FALSE(textTicks(h->view("entropy")).isEmpty());

  ASSERT_TRUE(h.load(tmp.q("p9")));
  h->updateAllViews();
  for (hl::views::InstrumentView* v : h->views()) {
    if (!v->followsStep()) continue;
    EXPECT_TRUE(textTicks(v).isEmpty()) << v->viewId().toStdString() << ": " << textTicks(v).join(", ").toStdString();
  }
  QString blockLabel;
  for (QCPAxisRect* r : h->view("ribbon")->plot()->axisRects())
    blockLabel += r->axis(QCPAxis::atBottom)->label() + " | ";
  EXPECT_TRUE(blockLabel.contains(QStringLiteral("all 8 layers"))) << blockLabel.toStdString();
  EXPECT_FALSE(blockLabel.contains(QStringLiteral("of 9"))) << blockLabel.toStdString();
}

TEST(InspectorContext, SessionWhoseRunBUsesTheAdapter_OpensWithTheAdapterBoxTicked) {
  // Finding 4: the adapter box stayed unchecked while run B used the adapter.
  TempDir tmp("adapterbox");
  writeDoraAdapter(tmp.path / "dora");
  const QString file = tmp.q("adapter.hlsession");
  {
    Harness h;
    ASSERT_TRUE(h.load(demoDir()));
    ASSERT_TRUE(h.step(3));
    bool loaded = false;
    auto c = QObject::connect(h.w.get(), &hl::app::MainWindow::adapterLoaded, [&] { loaded = true; });
    h->loadAdapter(tmp.q("dora"));
    ASSERT_TRUE(waitFor([&] { return loaded; }));
    QObject::disconnect(c);
    ASSERT_TRUE(toggle(h, [](hl::app::Toggles& t) { t.adapter = true; }));
    ASSERT_NE(h->runB(), nullptr);
    ASSERT_TRUE(save(h, file));
  }
  Harness h;  // a fresh window, as `hybridlens-gui session.hlsession` starts
  ASSERT_TRUE(openAndSettle(h, file));
  ASSERT_NE(h->runB(), nullptr);
  EXPECT_FALSE(h->runB()->settings.adapter.empty());
  EXPECT_TRUE(h->runPanel()->findChild<QCheckBox*>("adapterToggle")->isChecked());
  EXPECT_TRUE(h->runPanel()->toggles().adapter);
  EXPECT_TRUE(h.errors.isEmpty()) << h.errors.join('\n').toStdString();
}

TEST(InspectorContext, BadRememberedSettings_AreCorrectedOnce_AndDoNotFailAgain) {
  // Finding 8: a bad remembered prompt, or max-new 1,000,000, failed again at every start.
  {
    QSettings s;
    s.setValue("run/prompt", "1, 99999");  // outside demo-random's vocabulary [0, 4096)
    s.setValue("run/idsMode", true);
    s.setValue("run/maxNew", 1000000);
    s.sync();
  }
  for (int start = 0; start < 2; ++start) {
    SCOPED_TRACE("start " + std::to_string(start));
    Harness h;
    EXPECT_EQ(h->runPanel()->maxNewTokens(), 64);
    bool started = false;
    auto c = QObject::connect(h.w.get(), &hl::app::MainWindow::runStarted, [&] { started = true; });
    ASSERT_TRUE(h->openCheckpoint(demoDir()));
    ASSERT_TRUE(waitFor([&] { return started || !h.errors.isEmpty(); }));
    QObject::disconnect(c);
    EXPECT_TRUE(h.errors.isEmpty()) << h.errors.join('\n').toStdString();
    EXPECT_FALSE(h->runPanel()->promptText().contains(QStringLiteral("99999")));
    EXPECT_EQ(QSettings().value("run/maxNew").toInt(), 64);
    EXPECT_FALSE(QSettings().value("run/prompt").toString().contains(QStringLiteral("99999")));
    ASSERT_TRUE(h.settle());
  }
  QSettings().remove("run");
}

TEST(InspectorContext, RecordsAreShared_ByTheEngineTheRecordingAndTheAutosave) {
  // Item 2: one copy of the data — the autosave snapshot and the engine's recorder hold the same
  // records as the window, not copies.
  Harness h;
  ASSERT_TRUE(h.load(demoDir()));
  ASSERT_TRUE(h.step(4));
  const hl::Run& a = *h->runA();
  const std::shared_ptr<const hl::Recording> snap = h->context()->snapshot();
  ASSERT_EQ(snap->runs[0].records.size(), 4u);
  for (size_t t = 0; t < 4; ++t) {
    EXPECT_EQ(&snap->runs[0].records[t], &a.records[t]) << "token " << t << " was copied";
    // The window, the snapshot and the engine's recorder: three holders of one record.
    EXPECT_GE(a.records.holders(t), 3) << "token " << t;
  }
}

TEST(InspectorContext, ClosingALongRecording_GivesItsMemoryBack) {
  // Finding 14: after a long run, going back to a short session kept the memory resident. A small
  // synthetic session by default; HL_LONG_SESSION=file.hlsession measures a real one (the README's
  // figure: `hybridlens record --generate 4096` on demo-random).
  const char* longFile = std::getenv("HL_LONG_SESSION");
  const int T = 1200;
  TempDir tmp("memory");
  const hl::JambaConfig c = hl::preset_config("demo-random");
  auto make = [&](int tokens) {
    hl::Recording rec;
    rec.config = c;
    rec.checkpoint = {"/nonexistent/demo", "demo", std::string(64, 'c'), std::string(64, 'w')};
    hl::Run run;
    run.label = "A";
    run.settings.full = true;
    const hl::LayerSchedule sched = hl::LayerSchedule::from_config(c);
    const int64_t An = sched.num_attention(), nh = c.num_attention_heads, Mn = sched.num_ssm();
    for (int t = 0; t < tokens; ++t) {
      hl::TokenTrace r;
      r.token_id = t % 7;
      r.position = t;
      r.logits.assign(static_cast<size_t>(c.vocab_size), 0.25f);
      r.attn_rows.assign(static_cast<size_t>(An * nh * (t + 2)), 1.0f / static_cast<float>(t + 2));
      r.ssm_delta.assign(static_cast<size_t>(Mn * c.mamba_inner()), 0.5f);
      rec.tokens.push_back(r.token_id);
      run.records.push_back(std::move(r));
    }
    run.prompt_tokens = tokens;
    rec.runs.push_back(std::move(run));
    return rec;
  };
  // The bytes the long run's records hold, counted independently of the app.
  double recordBytes = 0;
  {
    const hl::Recording longRec = longFile ? hl::load_session(longFile) : make(T);
    for (const hl::Run& run : longRec.runs)
      for (const hl::TokenTrace& r : run.records)
        for (const std::vector<float>* v : {&r.logits, &r.attn_rows, &r.ssm_delta, &r.ssm_retained, &r.attn_entropy,
                                            &r.attn_entropy_norm, &r.attn_mass, &r.attn_max_logit, &r.router_probs,
                                            &r.rank1_distance, &r.resid_max_abs, &r.ssm_delta_mean, &r.router_lse})
          recordBytes += 4.0 * static_cast<double>(v->size());
    if (!longFile) hl::save_session(tmp.path / "long.hlsession", longRec);
    hl::save_session(tmp.path / "short.hlsession", make(4));
  }
  hl::app::InspectorContext::releaseMemory();
  Harness h;
  const double before = residentBytes();
  ASSERT_TRUE(openAndSettle(h, longFile ? QString::fromLocal8Bit(longFile) : tmp.q("long.hlsession")));
  if (!longFile) ASSERT_EQ(h->runA()->records.size(), static_cast<size_t>(T));
  const double withLong = residentBytes();
  ASSERT_TRUE(openAndSettle(h, tmp.q("short.hlsession")));
  ASSERT_EQ(h->runA()->records.size(), 4u);
  waitFor([] { return false; }, 300);  // late callbacks of the reader thread
  const double afterShort = residentBytes();
  std::printf("long session: %.1f MB of records; resident %.1f MB before, %.1f MB with it, %.1f MB after the short one\n",
              recordBytes / 1e6, before / 1e6, withLong / 1e6, afterShort / 1e6);
  EXPECT_GT(withLong - afterShort, 0.6 * recordBytes)
      << "resident " << withLong / 1e6 << " MB → " << afterShort / 1e6 << " MB; records " << recordBytes / 1e6 << " MB";
}

TEST(InspectorContext, ViewsRedrawOnlyForTheChangesTheyDrawFrom) {
  // Item 1: the context says what changed; the ribbon (no step) is not redrawn by scrubbing or by
  // appended records, the entropy view is; a hidden view catches up when shown.
  Harness h;
  ASSERT_TRUE(h.load(demoDir()));
  ASSERT_TRUE(h.step(4));
  hl::views::InstrumentView* ribbon = h->view("ribbon");
  hl::views::InstrumentView* entropy = h->view("entropy");
  h->updateAllViews();
  const int r0 = ribbon->redrawCount(), e0 = entropy->redrawCount();
  h->scrubTo(1);
  EXPECT_EQ(ribbon->redrawCount(), r0) << "a step change redrew the ribbon";
  EXPECT_EQ(ribbon->state().step, 1) << "the ribbon's state must still follow";
  EXPECT_EQ(entropy->redrawCount(), e0 + 1);
  EXPECT_EQ(entropy->state().step, 1);
  ASSERT_TRUE(h.step(2));
  h->updateAllViews();
  EXPECT_EQ(ribbon->redrawCount(), r0) << "appended records redrew the ribbon";
  EXPECT_GT(entropy->redrawCount(), e0 + 1);
  h->selectLayer(2);
  EXPECT_EQ(ribbon->redrawCount(), r0 + 1);
  EXPECT_EQ(ribbon->state().layer, 2);
}

TEST(InspectorContext, EachToggleMakesItsOwnRun_ListedWithItsChangeFromA) {
  // Item 5 and finding 13: toggles stacked into one run B, and Reset silently made them run A.
  Harness h;
  ASSERT_TRUE(h.load(demoDir()));
  ignoreEos(h);
  ASSERT_TRUE(h.step(3));
  ASSERT_TRUE(toggle(h, [](hl::app::Toggles& t) { t.registers = 2; }));
  ASSERT_TRUE(toggle(h, [](hl::app::Toggles& t) {
    t.normalizerOverride = true;
    t.normalizer = hl::Normalizer::Softmax1;
  }));
  const hl::Recording& rec = *h->recording();
  ASSERT_EQ(rec.runs.size(), 3u);
  // Copies: Reset below replaces the recording, and A's settings are compared after it.
  const hl::RunSettings a = rec.runs[0].settings, b = rec.runs[1].settings, c = rec.runs[2].settings;
  EXPECT_EQ(b.registers_used, 2);
  EXPECT_EQ(b.normalizer_override, a.normalizer_override) << "run B changes the registers only";
  EXPECT_TRUE(c.normalizer_override);
  EXPECT_EQ(c.registers_used, a.registers_used) << "run C changes the normalizer only, not stacked on B";
  EXPECT_EQ(h->runB(), &rec.runs[2]);
  auto* list = h->findChild<hl::app::RunList*>("runList");
  ASSERT_NE(list, nullptr);
  h->updateAllViews();
  const QStringList rows = list->rowTexts();
  ASSERT_EQ(rows.size(), 3);
  EXPECT_TRUE(rows[1].contains(QStringLiteral("registers 0 → 2"))) << rows[1].toStdString();
  EXPECT_TRUE(rows[2].contains(QStringLiteral("normalizer softmax1"))) << rows[2].toStdString();
  EXPECT_FALSE(rows[2].contains(QStringLiteral("registers"))) << rows[2].toStdString();

  // Choosing B in the list compares B again (re-run so that it steps along), and both step on.
  bool changed = false;
  auto conn = QObject::connect(h.w.get(), &hl::app::MainWindow::compareChanged, [&] { changed = true; });
  list->setCurrentRow(1);
  ASSERT_TRUE(waitFor([&] { return changed && !h->isBusy(); }));
  QObject::disconnect(conn);
  EXPECT_EQ(h->runB(), &h->recording()->runs[1]);
  EXPECT_EQ(h->runPanel()->toggles().registers, 2);
  ASSERT_TRUE(h.step(1));
  EXPECT_EQ(h->runB()->records.size(), 4u);
  EXPECT_EQ(h->recording()->runs[2].records.size(), 3u) << "a run not compared stays as it was";

  // Reset keeps A's settings as the baseline; the toggles shown (B's) make run B of the new run.
  bool started = false;
  conn = QObject::connect(h.w.get(), &hl::app::MainWindow::runStarted, [&] { started = true; });
  ASSERT_TRUE(h->resetRun());
  ASSERT_TRUE(waitFor([&] { return started && !h->isBusy(); }));
  QObject::disconnect(conn);
  EXPECT_EQ(h->runA()->settings.registers_used, a.registers_used);
  ASSERT_NE(h->runB(), nullptr);
  EXPECT_EQ(h->runB()->settings.registers_used, 2);
  EXPECT_TRUE(h.errors.isEmpty()) << h.errors.join('\n').toStdString();
}
