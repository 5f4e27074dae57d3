// The attention pattern for real use (issue 17 item 6, finding 12) and the latency floor (finding
// 6): log and power colour scales against their closed forms, the colour bar naming the scale,
// token labels on both axes once zoomed in, the all-heads grid with click-to-focus, the head
// selector, the whole matrix in the CSV; the DRAM floor not drawn above a cache-resident p50.
#include <gtest/gtest.h>

#include <QComboBox>
#include <QMouseEvent>
#include <QSpinBox>
#include <QApplication>
#include <cmath>
#include <memory>

#include "tests/views/view_test_util.h"
#include "views/attention_head_grid.h"
#include "views/instrument_views.h"
#include "views/token_axis_ticker.h"

using hl::test::demo;
using hl::test::demoState;
using namespace hl::views;

namespace {

std::unique_ptr<AttentionPatternView> attention(const ViewState& s) {
  auto v = std::make_unique<AttentionPatternView>();
  v->resize(900, 700);
  v->setState(s);
  return v;
}

// The colour-map index a 1 × 1 heatmap of `value` gets from the CPU renderer.
int renderedIndex(const HeatmapStyle& st, float value) {
  CpuHeatmapRenderer r;
  HeatmapData d(1, 0);
  d.addRow(&value, 1);
  const QImage img = r.render(d, QRectF(0, 0, 1, 1), st, QSize(1, 1));
  const QRgb px = img.pixel(0, 0);
  const QVector<QRgb>& lut = colormapLut(st.cmap);
  for (int i = 0; i < 256; ++i)
    if ((lut[i] & 0xffffff) == (px & 0xffffff)) return i;
  return -1;
}

}  // namespace

TEST(ColorScale, LogAndPowerMapValuesAsTheirClosedForms) {
  HeatmapStyle log{0.0f, 1.0f, Colormap::Viridis, Pooling::Max, ColorScale::Log, 0.5f, 4.0f};
  // log10(v) over [-4, 0] (values exact in binary, away from rounding edges).
  auto logIndex = [](double v) { return static_cast<int>((std::log10(v) + 4.0) / 4.0 * 255.0 + 0.5); };
  EXPECT_EQ(renderedIndex(log, 1.0f / 64), logIndex(1.0 / 64));      // 140
  EXPECT_EQ(renderedIndex(log, 1.0f / 1024), logIndex(1.0 / 1024));  // 64
  EXPECT_EQ(renderedIndex(log, 1.0f), 255);
  EXPECT_EQ(renderedIndex(log, 1e-6f), 0);  // below four decades: the lowest colour
  HeatmapStyle pw{0.0f, 1.0f, Colormap::Viridis, Pooling::Max, ColorScale::Power, 0.5f, 4.0f};
  EXPECT_EQ(renderedIndex(pw, 0.25f), 128);   // sqrt(0.25) = 0.5
  EXPECT_EQ(renderedIndex(pw, 0.0625f), 64);  // sqrt(1/16) = 0.25
  HeatmapStyle lin{0.0f, 1.0f, Colormap::Viridis, Pooling::Max};
  EXPECT_EQ(renderedIndex(lin, 0.25f), static_cast<int>(0.25 * 255 + 0.5));
  // Many values: the table lookup agrees with colorPosition to within one colour step.
  for (float v = 1e-5f; v < 1.0f; v *= 1.37f)
    for (const HeatmapStyle& st : {log, pw})
      EXPECT_NEAR(renderedIndex(st, v), colorPosition(st, v) * 255.0f, 1.0f) << v;
}

TEST(AttentionPatternView, ColourScaleSelector_ColourBarNamesTheScale) {
  auto v = attention(demoState(11, 2));
  QCPColorScale* bar = nullptr;
  for (QCPLayoutElement* e : v->plot()->plotLayout()->elements(true))
    if (auto* cs = qobject_cast<QCPColorScale*>(e)) bar = cs;
  ASSERT_NE(bar, nullptr);
  EXPECT_EQ(v->weightStyle().scale, ColorScale::Log) << "log by default: linear is black beyond ~50 tokens";
  EXPECT_TRUE(bar->axis()->label().contains("log")) << bar->axis()->label().toStdString();
  EXPECT_EQ(bar->dataScaleType(), QCPAxis::stLogarithmic);
  auto* combo = v->findChild<QComboBox*>("attentionColorScale");
  ASSERT_NE(combo, nullptr);
  combo->setCurrentIndex(combo->findData(static_cast<int>(ColorScale::Power)));
  EXPECT_EQ(v->weightStyle().scale, ColorScale::Power);
  EXPECT_TRUE(bar->axis()->label().contains("power")) << bar->axis()->label().toStdString();
  EXPECT_EQ(bar->dataScaleType(), QCPAxis::stLinear);
  EXPECT_EQ(v->heatmap("keys A")->style().scale, ColorScale::Power);
  combo->setCurrentIndex(combo->findData(static_cast<int>(ColorScale::Linear)));
  EXPECT_TRUE(bar->axis()->label().contains("linear")) << bar->axis()->label().toStdString();
}

TEST(AttentionPatternView, ZoomedIn_BothAxesNameTheTokens) {
  const int step = 11;
  auto v = attention(demoState(step, 2));
  QCPAxisRect* r = v->heatmap("keys A")->keyAxis()->axisRect();
  QCPAxis* x = r->axis(QCPAxis::atBottom);
  QCPAxis* y = r->axis(QCPAxis::atLeft);
  // More cells than fit the axis (a small view): numbers only.
  v->resize(260, 300);
  v->setState(v->state());
  v->plot()->replot(QCustomPlot::rpImmediateRefresh);  // the app's queued replot after a size change
  EXPECT_FALSE(static_cast<TokenAxisTicker*>(x->ticker().data())->lastLabelled()) << r->width();
  v->resize(900, 700);
  v->setState(v->state());
  x->setRange(0, step + 1);
  y->setRange(0, step + 1);
  v->plot()->replot(QCustomPlot::rpImmediateRefresh);
  v->plot()->replot(QCustomPlot::rpImmediateRefresh);
  ASSERT_TRUE(static_cast<TokenAxisTicker*>(x->ticker().data())->lastLabelled());
  ASSERT_TRUE(static_cast<TokenAxisTicker*>(y->ticker().data())->lastLabelled());
  const hl::Recording& rec = demo().rec;
  ASSERT_EQ(static_cast<int>(x->tickVector().size()), step + 1);
  for (int c = 0; c <= step; ++c) {
    EXPECT_EQ(x->tickVector()[c], c + 0.5);
    EXPECT_EQ(x->tickVectorLabels()[c], tokenLabel(rec, c).left(TokenAxisTicker::kMaxLabelChars));
    EXPECT_EQ(y->tickVectorLabels()[c], tokenLabel(rec, c).left(TokenAxisTicker::kMaxLabelChars));
  }
  EXPECT_EQ(x->tickLabelRotation(), -90);
}

TEST(AttentionPatternView, AllHeadsGrid_ClickFocusesAHead_AndTheSelectorPicksOne) {
  const int step = 9;
  auto v = attention(demoState(step, 6));
  const ModelShape s = modelShape(demo().rec.config);
  int asked = -1;
  QObject::connect(v.get(), &InstrumentView::headClicked, [&](int h) {
    asked = h;
    ViewState st = v->state();
    st.head = h;
    v->setState(st);
  });
  auto* spin = v->findChild<QSpinBox*>("attentionHead");
  ASSERT_NE(spin, nullptr);
  EXPECT_EQ(spin->maximum(), s.nh - 1);
  spin->setValue(2);
  EXPECT_EQ(asked, 2);
  EXPECT_EQ(v->shownHead(), 2);
  v->setAllHeads(true);
  AttentionHeadGrid* grid = v->headGrid();
  ASSERT_EQ(grid->headCount(), s.nh);
  EXPECT_TRUE(grid->isVisibleTo(v.get()));
  EXPECT_FALSE(v->plot()->isVisibleTo(v.get()));
  const int target = s.nh - 1;
  const QPoint at = grid->cellRect(target).center();
  QMouseEvent release(QEvent::MouseButtonRelease, at, grid->mapToGlobal(at), Qt::LeftButton, Qt::NoButton,
                      Qt::NoModifier);
  QApplication::sendEvent(grid, &release);
  EXPECT_EQ(asked, target);
  EXPECT_EQ(v->shownHead(), target);
  EXPECT_FALSE(v->allHeads()) << "a click focuses the head in the one-head figure";
  EXPECT_TRUE(v->plot()->isVisibleTo(v.get()));
  EXPECT_TRUE(v->figureTitle().contains(QStringLiteral("head %1").arg(target)));
}

TEST(AttentionPatternView, Csv_HoldsTheWholeMatrixDrawn) {
  const int step = 7, layer = 2, head = 1;
  ViewState st = demoState(step, layer, true);
  st.head = head;
  auto v = attention(st);
  const ModelShape s = modelShape(demo().rec.config);
  const int ord = s.attnOrdinal(layer);
  const QStringList lines = v->csv().split('\n', Qt::SkipEmptyParts);
  // Per run, per query q of the run (not only 0..step): keys 0..q and the null share.
  const int T = static_cast<int>(demo().rec.runs[0].records.size());
  int expected = 0;
  for (int q = 0; q < T; ++q) expected += q + 2;
  ASSERT_EQ(lines.size(), 1 + 2 * expected);
  int i = 1;
  for (const char* run : {"A", "B"}) {
    const hl::Run& r = demo().rec.runs[run[0] == 'A' ? 0 : 1];
    for (int q = 0; q < T; ++q) {
      const int have = q + 2;
      for (int k = 0; k < have; ++k, ++i) {
        const QStringList c = lines[i].split(',');
        ASSERT_EQ(c[0], run);
        EXPECT_EQ(c[3].toInt(), q);
        EXPECT_EQ(c[4], k == have - 1 ? QStringLiteral("null") : QString::number(k));
        EXPECT_EQ(c.last().toFloat(), r.records[q].attn_rows[(ord * s.nh + head) * have + k]) << lines[i].toStdString();
      }
    }
  }
}

TEST(LatencyView, Floor_NotDrawnAboveACacheResidentMeasurement) {
  const int step = 15;
  auto floorLines = [](InstrumentView* v) {
    int n = 0;
    for (int i = 0; i < v->plot()->itemCount(); ++i)
      if (auto* l = qobject_cast<QCPItemStraightLine*>(v->plot()->item(i)))
        n += l->pen().style() == Qt::DashDotLine;
    return n;
  };
  auto make = [](const ViewState& s) {
    auto v = std::make_unique<LatencyView>();
    v->resize(900, 600);
    v->setState(s);
    return v;
  };
  ViewState s = demoState(step);
  // A floor far below the measurement (huge bandwidth): drawn, and it binds.
  s.hw.bandwidthGBs = 1e6;
  auto low = make(s);
  EXPECT_GT(floorLines(low.get()), 0);
  EXPECT_TRUE(low->figureTitle().contains("floor"));
  EXPECT_TRUE(low->csv().split('\n')[1].endsWith(",1"));
  // A floor above p50 (tiny bandwidth): the weights come from cache, no floor line, the title says so.
  s.hw.bandwidthGBs = 1e-3;
  auto high = make(s);
  EXPECT_EQ(floorLines(high.get()), 0);
  EXPECT_TRUE(high->figureTitle().contains("below the DRAM floor")) << high->figureTitle().toStdString();
  EXPECT_TRUE(high->csv().split('\n')[1].endsWith(",0"));
  // Weights that fit in the last-level cache: no DRAM floor whatever the bandwidth.
  s.hw.bandwidthGBs = 1e6;
  s.hw.cacheBytes = s.hw.weightBytesPerToken * 2;
  auto cached = make(s);
  EXPECT_EQ(floorLines(cached.get()), 0);
  EXPECT_TRUE(cached->figureTitle().contains("cache")) << cached->figureTitle().toStdString();
}
