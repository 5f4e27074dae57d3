// The sweep statistics window on Qt's offscreen platform (issue 21 item 2): a stats file written
// with known values opened through File > Open sweep statistics… (the file chooser answered by the window's hook),
// the plotted boxes, histograms and router bars read back against the file's numbers (and the
// values put in), a second sweep compared beside it, a file of another shape refused in one line, a
// corrupted file reported while the window keeps working, and the model's run left as it was.
#include <gtest/gtest.h>

#include <QComboBox>
#include <QDropEvent>
#include <QLabel>
#include <QMimeData>
#include <QPushButton>
#include <QUrl>
#include <cmath>

#include "app/gui_main.h"
#include "app/help_dialog.h"
#include "app/stats_window.h"
#include "gui_test_util.h"
#include "sessions/sweep_summary.h"
#include "tests/sweep/sweep_test_util.h"

namespace {

using hl::test::Harness;
using hl::test::TempDir;
using hl::test::waitFor;

// A stats file of the demo-random schedule (or `preset`) with known values: attention cell c holds
// 20 values 1 + c + 0.1 j (j = 0..19), Mamba layer m 10 values 10^(−2 + m/4 + 0.05 j), MoE layer x
// routes 10 tokens to experts by a fixed pattern. `shift` moves every attention value (sweep B).
hl::SweepStats writeStats(const std::string& path, const std::string& normalizer, double shift = 0,
                          const std::string& preset = "demo-random") {
  const hl::LayerSchedule s = hl::test::demoSchedule(preset);
  hl::SweepStats st = hl::SweepStats::for_schedule(s);
  const auto& ins = hl::sweep_instruments();
  for (size_t i = 0; i < 4; ++i)  // the (A_n, nh) instruments
    for (int64_t c = 0; c < st.dists[i].cells(); ++c)
      for (int j = 0; j < 20; ++j)
        st.dists[i].add(c, (1 + c + 0.1 * j + shift) / (i == 0 ? 1 : 100), st.sketch, ins[i].hist);
  for (int64_t m = 0; m < st.dists[4].cells(); ++m)
    for (int j = 0; j < 10; ++j) st.dists[4].add(m, std::pow(10.0, -2 + m / 4.0 + 0.05 * j), st.sketch, ins[4].hist);
  hl::RouterSums& r = st.router;
  for (int64_t x = 0; x < r.moe; ++x) {
    r.tokens[static_cast<size_t>(x)] = 10;
    r.lse_sq_sum[static_cast<size_t>(x)] = 5;
    for (int64_t t = 0; t < 10 * r.top_k; ++t) ++r.topk_count[static_cast<size_t>(x * r.experts + (t + x) % 3)];
    for (int64_t e = 0; e < r.experts; ++e) r.prob_sum[static_cast<size_t>(x * r.experts + e)] = 10.0 / r.experts;
  }
  st.prompts = 3;
  st.tokens = 30;
  hl::save_sweep_stats(path, st, hl::test::sweepExtra(s, normalizer, preset), false);
  return st;
}

// Answers the next file chooser of the sweep statistics with `path` (the main window's file hook,
// as its error and discard hooks stand in for dialogs) and records its title.
void answerFileChooser(Harness& h, const QString& path, QString* title) {
  h->setFileHook([path, title](const QString& t) {
    *title = t;
    return path;
  });
}

template <typename T>
T* viewOf(hl::app::StatsWindow* w) {
  for (hl::views::StatsView* v : w->views())
    if (auto* t = qobject_cast<T*>(v)) return t;
  return nullptr;
}

TEST(GuiStats, OpensThroughTheMenuAndDrawsTheFile) {
  TempDir tmp("stats_open");
  const std::string path = (tmp.path / "softmax.hlstats").string();
  const hl::SweepStats put = writeStats(path, "softmax");
  const hl::SweepFile file = hl::load_sweep_stats(path);
  Harness h;
  // A model and a run first: opening the stats must leave them as they are.
  ASSERT_TRUE(h.load(hl::test::demoDir()));
  ASSERT_TRUE(h.step(3));
  const hl::Run* runBefore = h->runA();
  const size_t recordsBefore = h.records();

  QAction* open = h->findChild<QAction*>("actionOpenStats");
  ASSERT_NE(open, nullptr);
  QString asked;
  answerFileChooser(h, QString::fromStdString(path), &asked);
  open->trigger();
  EXPECT_EQ(asked, "Open sweep statistics");
  hl::app::StatsWindow* sw = h->statsWindow();
  ASSERT_TRUE(waitFor([&] { return sw->document()->state().a != nullptr || !h.errors.isEmpty(); }));
  ASSERT_TRUE(h.errors.isEmpty()) << h.errors.join('\n').toStdString();
  EXPECT_TRUE(sw->isVisible());
  EXPECT_EQ(h->runA(), runBefore);
  EXPECT_EQ(h.records(), recordsBefore);
  EXPECT_TRUE(h->hasModel());
  // The header: checkpoint, prompts, tokens, options.
  const QString header = sw->findChild<QLabel*>("statsHeader")->text();
  EXPECT_TRUE(header.contains("3 prompts, 30 tokens")) << header.toStdString();
  EXPECT_TRUE(header.contains("normalizer=softmax")) << header.toStdString();
  EXPECT_TRUE(header.contains("demo-random")) << header.toStdString();

  // Every instrument in the selector, with its meaning.
  auto* instrument = sw->findChild<QComboBox*>("statsInstrument");
  ASSERT_EQ(instrument->count(), static_cast<int>(hl::sweep_instruments().size()));
  EXPECT_TRUE(sw->findChild<QLabel*>("statsMeaning")->text().contains("entropy"));

  // Boxes of attn_entropy, second attention layer (L6), per head.
  auto* row = sw->findChild<QComboBox*>("statsRow");
  ASSERT_EQ(row->count(), 3);  // every layer, L2, L6
  EXPECT_EQ(row->itemText(2), "L6");
  row->setCurrentIndex(2);
  emit row->activated(2);
  auto* boxes = viewOf<hl::views::StatsBoxView>(sw);
  ASSERT_NE(boxes, nullptr);
  auto* box = qobject_cast<QCPStatisticalBox*>([&]() -> QCPAbstractPlottable* {
    for (int i = 0; i < boxes->plot()->plottableCount(); ++i)
      if (boxes->plot()->plottable(i)->name() == "A") return boxes->plot()->plottable(i);
    return nullptr;
  }());
  ASSERT_NE(box, nullptr);
  const hl::Distribution& d0 = file.stats.dists[0];
  const int64_t nh = d0.shape[1];
  ASSERT_EQ(box->data()->size(), nh);
  for (int64_t k = 0; k < nh; ++k) {
    const int64_t cell = nh + k;
    const hl::CellBox b = hl::cell_box(d0, cell, file.stats.sketch);
    const auto it = box->data()->at(static_cast<int>(k));
    EXPECT_DOUBLE_EQ(it->key, static_cast<double>(k));
    EXPECT_EQ(it->median, b.median);
    EXPECT_EQ(it->lowerQuartile, b.q25);
    EXPECT_EQ(it->upperQuartile, b.q75);
    EXPECT_EQ(it->minimum, b.whisker_lo);
    EXPECT_EQ(it->maximum, b.whisker_hi);
    // Against the values put in: the median is the 10th of 20 (rank 9.5), within α = 1 %.
    const double tenth = 1 + cell + 0.9;
    EXPECT_NEAR(it->median, tenth, tenth * 0.01);
    EXPECT_EQ(boxes->cellAt("A", static_cast<int>(k)), cell);
  }
  QCPGraph* mean = boxes->graph("A mean");
  ASSERT_NE(mean, nullptr);
  EXPECT_NEAR(mean->data()->at(0)->value, 1 + nh + 0.95, 1e-5);  // mean of 20 values 1 + c + 0.1 j
  // The tooltip at the first box: count and mean.
  boxes->resize(900, 600);
  boxes->plot()->resize(900, 600);
  boxes->plot()->replot();
  const QPoint at(static_cast<int>(box->keyAxis()->coordToPixel(0)),
                  static_cast<int>(box->valueAxis()->coordToPixel(box->data()->at(0)->median)));
  const QString tip = boxes->tooltipAt(at);
  EXPECT_TRUE(tip.contains("count 20")) << tip.toStdString();
  EXPECT_TRUE(tip.contains("mean")) << tip.toStdString();
  EXPECT_TRUE(tip.contains("L6 h0") || tip.contains("h0")) << tip.toStdString();

  // Histograms of ssm_delta_mean: log10 range [−4, 2], one curve per Mamba layer.
  instrument->setCurrentIndex(4);
  auto* hist = viewOf<hl::views::StatsHistView>(sw);
  const hl::Distribution& d4 = file.stats.dists[4];
  const hl::SweepAxes ax = hl::sweep_axes(file.manifest);
  for (int64_t m = 0; m < d4.cells(); ++m) {
    QCPGraph* g = hist->graph("A " + QString::fromStdString(hl::axis_label(ax, "M_n", m)));
    ASSERT_NE(g, nullptr) << m;
    ASSERT_EQ(g->data()->size(), hl::kHistBins);
    int64_t total = 0;
    for (int b = 0; b < hl::kHistBins; ++b) {
      const double count = static_cast<double>(d4.hist[static_cast<size_t>(m * hl::kHistBins + b)]);
      total += static_cast<int64_t>(count);
      EXPECT_DOUBLE_EQ(g->data()->at(b)->value, count / 10.0);
      EXPECT_DOUBLE_EQ(g->data()->at(b)->key, -4 + (b + 0.5) * 6.0 / 32);
    }
    EXPECT_EQ(total, 10);
  }
  EXPECT_TRUE(hist->plot()->axisRect()->axis(QCPAxis::atBottom)->label().contains("log10"));

  // The router: f_i per expert of each MoE layer against the counts put in; balance per layer.
  auto* router = viewOf<hl::views::StatsRouterView>(sw);
  QCPBars* load = router->bars("load A");
  ASSERT_NE(load, nullptr);
  const hl::RouterSums& r = put.router;
  ASSERT_EQ(load->data()->size(), r.moe * r.experts);
  const std::vector<hl::RouterLayerLoad> loads = hl::router_loads(file.stats.router);
  for (int64_t x = 0; x < r.moe; ++x)
    for (int64_t e = 0; e < r.experts; ++e) {
      const auto it = load->data()->at(static_cast<int>(x * r.experts + e));
      EXPECT_DOUBLE_EQ(it->key, static_cast<double>(x * (r.experts + 1) + e));
      const double f = static_cast<double>(r.topk_count[static_cast<size_t>(x * r.experts + e)]) / (10.0 * r.top_k);
      EXPECT_NEAR(it->value, f, 1e-12);
      EXPECT_EQ(it->value, loads[static_cast<size_t>(x)].load[static_cast<size_t>(e)]);
    }
  QCPBars* balance = router->bars("balance A");
  ASSERT_NE(balance, nullptr);
  EXPECT_EQ(balance->data()->at(0)->value, loads[0].balance_loss);

  // Export through the views' figure export.
  for (const char* f : {"png", "svg", "pdf"}) {
    QString err;
    EXPECT_TRUE(router->exportFigure(tmp.q(std::string("router.") + f), f, 800, 600, 96, &err)) << err.toStdString();
  }
  EXPECT_TRUE(router->csv().contains("load,importance"));
  // The help names the whiskers' quantiles.
  sw->findChild<QPushButton*>("statsHelp")->click();
  auto* help = sw->findChild<QDialog*>("instrumentsHelp");
  ASSERT_NE(help, nullptr);
  EXPECT_TRUE(hl::app::instrumentsHelpText().contains("q05 and q95"));
  help->close();
  EXPECT_EQ(h->runA(), runBefore);
  EXPECT_EQ(h.records(), recordsBefore);
}

TEST(GuiStats, CompareMismatchAndCorruptFile) {
  TempDir tmp("stats_compare");
  const std::string pa = (tmp.path / "softmax.hlstats").string(), pb = (tmp.path / "softmax1.hlstats").string();
  const std::string pc = (tmp.path / "tiny.hlstats").string(), pz = (tmp.path / "broken.hlstats").string();
  writeStats(pa, "softmax");
  writeStats(pb, "softmax1", 0.5);
  writeStats(pc, "softmax", 0, "tiny");
  {
    std::ifstream in(pa, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    bytes.resize(bytes.size() - 40);  // truncated: the reader refuses it
    std::ofstream(pz, std::ios::binary) << bytes;
  }
  Harness h;
  ASSERT_TRUE(h->openStats(QString::fromStdString(pa)));
  hl::app::StatsWindow* sw = h->statsWindow();
  ASSERT_TRUE(waitFor([&] { return sw->document()->state().a != nullptr || !h.errors.isEmpty(); }));
  ASSERT_TRUE(h.errors.isEmpty()) << h.errors.join('\n').toStdString();

  // Compare with… through the window's button and the file dialog.
  QString asked;
  answerFileChooser(h, QString::fromStdString(pb), &asked);
  sw->findChild<QPushButton*>("statsCompare")->click();
  EXPECT_EQ(asked, "Compare with sweep statistics");
  ASSERT_TRUE(waitFor([&] { return sw->document()->state().b != nullptr || !h.errors.isEmpty(); }));
  ASSERT_TRUE(h.errors.isEmpty()) << h.errors.join('\n').toStdString();
  const hl::SweepFile fb = hl::load_sweep_stats(pb);
  auto* boxes = viewOf<hl::views::StatsBoxView>(sw);
  auto findBox = [&](const QString& name) -> QCPStatisticalBox* {
    for (int i = 0; i < boxes->plot()->plottableCount(); ++i)
      if (boxes->plot()->plottable(i)->name() == name)
        return qobject_cast<QCPStatisticalBox*>(boxes->plot()->plottable(i));
    return nullptr;
  };
  QCPStatisticalBox* a = findBox("A");
  QCPStatisticalBox* b = findBox("B");
  ASSERT_TRUE(a && b);
  ASSERT_EQ(a->data()->size(), b->data()->size());
  for (int i = 0; i < b->data()->size(); ++i) {
    EXPECT_NEAR(b->data()->at(i)->key - a->data()->at(i)->key, 0.4, 1e-12);  // side by side
    EXPECT_EQ(b->data()->at(i)->median, hl::cell_box(fb.stats.dists[0], i, fb.stats.sketch).median);
  }
  // The run B colour, as the run views draw B.
  EXPECT_EQ(b->pen().color(), hl::views::theme(false).runB);
  EXPECT_EQ(a->pen().color(), hl::views::theme(false).runA);
  const QString header = sw->findChild<QLabel*>("statsHeader")->text();
  EXPECT_TRUE(header.contains("options.normalizer: softmax vs softmax1")) << header.toStdString();
  EXPECT_NE(viewOf<hl::views::StatsRouterView>(sw)->bars("load B"), nullptr);
  EXPECT_NE(viewOf<hl::views::StatsHistView>(sw)->graph("B L2"), nullptr);

  // Another schedule: one line saying what differs; B stays.
  ASSERT_TRUE(h->compareStats(QString::fromStdString(pc)));
  ASSERT_TRUE(waitFor([&] { return !h.errors.isEmpty(); }));
  ASSERT_EQ(h.errors.size(), 1);
  EXPECT_TRUE(h.errors[0].startsWith("Cannot compare the sweeps: softmax.hlstats vs tiny.hlstats: different"))
      << h.errors[0].toStdString();
  EXPECT_FALSE(h.errors[0].contains('\n'));
  EXPECT_EQ(sw->document()->state().nameB, "softmax1.hlstats");

  // A corrupted file: one line naming it; A and B as they were, the window still drawing.
  h.errors.clear();
  ASSERT_TRUE(h->openStats(QString::fromStdString(pz)));
  ASSERT_TRUE(waitFor([&] { return !h.errors.isEmpty(); }));
  ASSERT_EQ(h.errors.size(), 1);
  EXPECT_TRUE(h.errors[0].startsWith("Could not open the sweep statistics: ")) << h.errors[0].toStdString();
  EXPECT_TRUE(h.errors[0].contains("broken.hlstats")) << h.errors[0].toStdString();
  EXPECT_FALSE(h.errors[0].contains('\n'));
  EXPECT_EQ(sw->document()->state().nameA, "softmax.hlstats");
  sw->findChild<QComboBox*>("statsInstrument")->setCurrentIndex(1);  // attn_entropy_norm
  a = findBox("A");
  ASSERT_NE(a, nullptr);
  const hl::SweepFile fa = hl::load_sweep_stats(pa);
  EXPECT_EQ(a->data()->at(0)->median, hl::cell_box(fa.stats.dists[1], 0, fa.stats.sketch).median);
  // End compare: A alone again.
  sw->findChild<QPushButton*>("statsEndCompare")->click();
  EXPECT_EQ(findBox("B"), nullptr);
  EXPECT_EQ(sw->document()->state().b, nullptr);
}

TEST(GuiStats, DroppedOrGivenOnTheCommandLine) {
  TempDir tmp("stats_drop");
  const std::string path = (tmp.path / "dropped.hlstats").string();
  writeStats(path, "softmax");
  // `hybridlens FILE.hlstats` and `--stats FILE`: the stats file, not a checkpoint.
  std::vector<std::string> args = {"hybridlens", path};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  hl::app::GuiArgs g = hl::app::parseGuiArgs(static_cast<int>(argv.size()), argv.data());
  EXPECT_EQ(g.stats, path);
  EXPECT_TRUE(g.checkpoint.empty());
  args = {"hybridlens", "--stats", path + ".missing"};
  argv.clear();
  for (std::string& a : args) argv.push_back(a.data());
  EXPECT_THROW(hl::app::parseGuiArgs(static_cast<int>(argv.size()), argv.data()), std::runtime_error);

  // Dropped on the main window: accepted, opened in the statistics window.
  Harness h;
  QMimeData mime;
  mime.setUrls({QUrl::fromLocalFile(QString::fromStdString(path))});
  QDragEnterEvent enter(QPoint(20, 20), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(h.w.get(), &enter);
  EXPECT_TRUE(enter.isAccepted());
  QDropEvent drop(QPointF(20, 20), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(h.w.get(), &drop);
  hl::app::StatsWindow* sw = h->statsWindow();
  ASSERT_TRUE(waitFor([&] { return sw->document()->state().a != nullptr || !h.errors.isEmpty(); }));
  EXPECT_TRUE(h.errors.isEmpty()) << h.errors.join('\n').toStdString();
  EXPECT_EQ(sw->document()->state().nameA, "dropped.hlstats");
  EXPECT_FALSE(h->hasModel());
  EXPECT_FALSE(h->isLoading());
}

}  // namespace
