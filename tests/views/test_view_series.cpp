// Every view's plotted series against the engine's trace values (issue 5 item 3): the entropy
// heatmap cells are attn_entropy_norm, the rank-1 curve is rank1_distance, router bars are the load
// counted independently here, and so on; plus B − A, tooltips with exact values, clicks, themes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "engine/probes/memory.h"
#include "tests/views/view_test_util.h"
#include "views/instrument_views.h"
#include "views/view_registry.h"

using hl::test::demo;
using hl::test::demoState;
using namespace hl::views;

namespace {

// Value of graph point `i` (sorted by key), NaN when absent.
double at(QCPGraph* g, int i) {
  return i < g->dataCount() ? g->data()->at(i)->value : NAN;
}
double barAt(QCPBars* b, double key) {
  for (int i = 0; i < b->dataCount(); ++i)
    if (b->data()->at(i)->key == key) return b->data()->at(i)->value;
  return NAN;
}

template <typename V>
std::unique_ptr<V> make(const ViewState& s) {
  auto v = std::make_unique<V>();
  v->resize(900, 600);
  v->setState(s);
  return v;
}

const hl::Run& runA() {
  return demo().rec.runs[0];
}
const hl::Run& runB() {
  return demo().rec.runs[1];
}
ModelShape shape() {
  return modelShape(demo().rec.config);
}

}  // namespace

TEST(EntropyView, HeatmapCells_AreAttnEntropyNorm_AndCurvesAreHeadMeans) {
  const int step = 9;
  auto v = make<EntropyView>(demoState(step));
  const ModelShape s = shape();
  ASSERT_EQ(s.An, 2);
  HeatmapPlottable* h = v->heatmap("entropy");
  ASSERT_NE(h, nullptr);
  ASSERT_EQ(h->heatmap()->rows(), s.An);
  ASSERT_EQ(h->heatmap()->cols(), s.nh);
  const hl::TokenTrace& r = runA().records[step];
  for (int o = 0; o < s.An; ++o)
    for (int k = 0; k < s.nh; ++k)
      EXPECT_EQ(h->heatmap()->value(o, k), r.attn_entropy_norm[o * s.nh + k]) << "layer " << o << " head " << k;
  QCPGraph* g = v->graph(layerName(s, s.attnLayers[1]) + " A");
  ASSERT_NE(g, nullptr);
  const int T = static_cast<int>(runA().records.size());
  ASSERT_EQ(g->dataCount(), T);  // every token, not 0..step
  for (int t = 0; t < T; ++t) {
    double m = 0;
    for (int k = 0; k < s.nh; ++k) m += runA().records[t].attn_entropy_norm[s.nh + k];
    EXPECT_NEAR(at(g, t), m / s.nh, 1e-12) << "token " << t;
  }
}

TEST(EntropyView, DiffMode_CellsAreBMinusA) {
  const int step = 6;
  auto v = make<EntropyView>(demoState(step, -1, true, true));
  HeatmapPlottable* h = v->heatmap("entropy B-A");
  ASSERT_NE(h, nullptr);
  const ModelShape s = shape();
  for (int o = 0; o < s.An; ++o)
    for (int k = 0; k < s.nh; ++k)
      EXPECT_FLOAT_EQ(h->heatmap()->value(o, k), runB().records[step].attn_entropy_norm[o * s.nh + k] -
                                                     runA().records[step].attn_entropy_norm[o * s.nh + k]);
}

TEST(AttentionPatternView, RowsAreAttnRows_NullColumnIsPNull) {
  const int step = 11, layer = 6;
  ViewState st = demoState(step, layer);
  st.head = 3;
  auto v = make<AttentionPatternView>(st);
  EXPECT_EQ(v->shownLayer(), layer);
  const ModelShape s = shape();
  const int ord = s.attnOrdinal(layer);
  HeatmapPlottable* keys = v->heatmap("keys A");
  HeatmapPlottable* null = v->heatmap("null A");
  ASSERT_NE(keys, nullptr);
  ASSERT_NE(null, nullptr);
  const int T = static_cast<int>(runA().records.size());
  ASSERT_EQ(keys->heatmap()->rows(), T);  // every query, the step marked
  for (int t = 0; t < T; ++t) {
    const std::vector<float>& row = runA().records[t].attn_rows;  // (A_n, nh, t + 2)
    const int have = t + 2;
    for (int k = 0; k <= t; ++k) EXPECT_EQ(keys->heatmap()->value(t, k), row[(ord * s.nh + 3) * have + k]);
    EXPECT_TRUE(std::isnan(keys->heatmap()->value(t, t + 1))) << "keys after the query are not drawn";
    EXPECT_EQ(null->heatmap()->value(t, 0), row[(ord * s.nh + 3) * have + have - 1]);
  }
  QCPBars* bars = v->bars("row A");
  ASSERT_NE(bars, nullptr);
  EXPECT_EQ(bars->dataCount(), step + 2);  // keys 0..step and the null slot
}

TEST(AttentionPatternView, SoftmaxOneB_NullShareAppears_DiffRowsAreBMinusA) {
  const int step = 5, layer = 2;
  auto v = make<AttentionPatternView>(demoState(step, layer, true, true));
  HeatmapPlottable* null = v->heatmap("null B-A");
  ASSERT_NE(null, nullptr);
  const ModelShape s = shape();
  const int ord = s.attnOrdinal(layer);
  for (int t = 0; t <= step; ++t) {
    const int have = t + 2;
    const float pa = runA().records[t].attn_rows[(ord * s.nh) * have + have - 1];
    const float pb = runB().records[t].attn_rows[(ord * s.nh) * have + have - 1];
    EXPECT_EQ(pa, 0.0f) << "softmax has no null share";
    EXPECT_GT(pb, 0.0f) << "softmax-1 has one";
    EXPECT_FLOAT_EQ(null->heatmap()->value(t, 0), pb - pa);
  }
}

TEST(Rank1View, DepthCurveIsRank1Distance_LogAxis) {
  const int step = 7;
  auto v = make<Rank1View>(demoState(step, 3));
  QCPGraph* g = v->graph("depth A");
  ASSERT_NE(g, nullptr);
  const std::vector<float>& r = runA().records[step].rank1_distance;
  ASSERT_EQ(g->dataCount(), static_cast<int>(r.size()));
  for (int c = 0; c < static_cast<int>(r.size()); ++c) {
    if (r[c] > 0)
      EXPECT_EQ(at(g, c), r[c]) << "depth " << c;
    else
      EXPECT_TRUE(std::isnan(at(g, c)));
  }
  EXPECT_EQ(g->valueAxis()->scaleType(), QCPAxis::stLogarithmic);
  QCPGraph* tok = v->graph("after L3 A");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->dataCount(), static_cast<int>(runA().records.size()));
  EXPECT_EQ(at(tok, step), runA().records[step].rank1_distance[4]);
}

// Issue 17 finding 11: B − A over tokens is not swamped by one token where the runs differ most.
TEST(Rank1View, DiffOverTokens_RobustScale_OneOutlyingTokenRunsOffIt) {
  hl::Recording rec = demo().rec;
  std::vector<hl::TokenTrace> b = rec.runs[1].records.to_vector();
  const int L = shape().L, step = static_cast<int>(b.size()) - 1;
  double typical = 0;  // max |B − A| of the final column without the outlier
  for (int i = 1; i <= step; ++i)
    typical = std::max(typical, std::fabs(static_cast<double>(b[i].rank1_distance[L]) -
                                          runA().records[i].rank1_distance[L]));
  ASSERT_GT(typical, 0);
  b[0].rank1_distance[L] += static_cast<float>(1000 * typical);  // token 0 far off
  rec.runs[1].records = hl::RecordList(std::move(b));
  hl::views::ViewState st = demoState(step, -1, true, true);
  st.rec = &rec;
  st.a = &rec.runs[0];
  st.b = &rec.runs[1];
  auto v = make<Rank1View>(st);
  QCPGraph* g = v->graph("final B-A");
  ASSERT_NE(g, nullptr);
  ASSERT_NEAR(at(g, 0), 1000 * typical, 2 * typical);  // the data is whole
  const QCPRange r = g->valueAxis()->range();
  EXPECT_LT(r.upper, 10 * typical) << "the outlier sets the scale";
  EXPECT_GE(r.upper, typical * 0.5);
  EXPECT_NEAR(r.lower, -r.upper, 1e-12);
  EXPECT_TRUE(g->valueAxis()->label().contains("robust scale: 1 point off it")) << g->valueAxis()->label().toStdString();
  // Without an outlier the whole of B − A is in view and the label says nothing more.
  auto plain = make<Rank1View>(demoState(step, -1, true, true));
  QCPGraph* p = plain->graph("final B-A");
  ASSERT_NE(p, nullptr);
  double mx = 0;
  for (int i = 0; i < p->dataCount(); ++i) mx = std::max(mx, std::fabs(at(p, i)));
  if (!p->valueAxis()->label().contains("robust scale")) {
    EXPECT_GE(p->valueAxis()->range().upper, mx);
  }
}

TEST(SsmDeltaView, HeatmapIsSsmDelta_BarsAreMeans_MarksFollowTheMedian) {
  const int step = 12, layer = 3;
  auto v = make<SsmDeltaView>(demoState(step, layer));
  const ModelShape s = shape();
  const int ord = s.mambaOrdinal(layer);
  ASSERT_GE(ord, 0);
  HeatmapPlottable* h = v->heatmap("delta A");
  ASSERT_NE(h, nullptr);
  const int T = static_cast<int>(runA().records.size());
  ASSERT_EQ(h->heatmap()->rows(), T);
  ASSERT_EQ(h->heatmap()->cols(), s.Di);
  for (int t = 0; t < T; t += 3)
    for (int c = 0; c < s.Di; c += 37)
      EXPECT_EQ(h->heatmap()->value(t, c), runA().records[t].ssm_delta[ord * s.Di + c]);
  QCPBars* bars = v->bars("layers A");
  ASSERT_NE(bars, nullptr);
  for (int o = 0; o < s.Mn; ++o) EXPECT_EQ(barAt(bars, s.mambaLayers[o]), runA().records[step].ssm_delta_mean[o]);
  std::vector<double> means;  // the marks are over the whole run drawn
  for (int t = 0; t < T; ++t) means.push_back(runA().records[t].ssm_delta_mean[ord]);
  const double med = percentile(means, 50);
  int writes = 0;
  for (double m : means) writes += m >= SsmDeltaView::kWrite * med;
  EXPECT_EQ(v->graph("write A")->dataCount(), writes);
  QCPGraph* ret = v->graph("retained A");
  ASSERT_NE(ret, nullptr);
  double sum = 0;
  for (int c = 0; c < s.Di; ++c) sum += runA().records[step].ssm_retained[ord * s.Di + c];
  EXPECT_NEAR(at(ret, step), sum / s.Di, 1e-9);
}

TEST(RouterView, BarsAreLoadAndImportanceCountedIndependently) {
  const int step = 10, layer = 5;
  auto v = make<RouterView>(demoState(step, layer));
  const ModelShape s = shape();
  const int ord = s.moeOrdinal(layer);
  std::vector<double> f(s.E, 0), P(s.E, 0);
  double z = 0;
  for (int t = 0; t <= step; ++t) {
    const hl::TokenTrace& r = runA().records[t];
    for (int j = 0; j < s.k; ++j) f[r.router_topk[ord * s.k + j]] += 1.0 / ((step + 1) * s.k);
    for (int e = 0; e < s.E; ++e) P[e] += r.router_probs[ord * s.E + e] / (step + 1);
    z += static_cast<double>(r.router_lse[ord]) * r.router_lse[ord] / (step + 1);
  }
  double bal = 0;
  for (int e = 0; e < s.E; ++e) bal += s.E * f[e] * P[e];
  QCPBars* fb = v->bars("f A");
  QCPBars* pb = v->bars("P A");
  ASSERT_NE(fb, nullptr);
  ASSERT_NE(pb, nullptr);
  for (int e = 0; e < s.E; ++e) {
    EXPECT_NEAR(barAt(fb, e), f[e], 1e-12) << "expert " << e;
    EXPECT_NEAR(barAt(pb, e), P[e], 1e-6) << "expert " << e;
  }
  EXPECT_NEAR(at(v->graph("balance A"), step), bal, 1e-6);
  EXPECT_NEAR(at(v->graph("z-loss A"), step), z, 1e-4);
  // The current token's top-k bars hold its top-k experts' probabilities.
  QCPBars* top = v->bars("topk A");
  const hl::TokenTrace& r = runA().records[step];
  for (int j = 0; j < s.k; ++j) {
    const int e = r.router_topk[ord * s.k + j];
    EXPECT_EQ(barAt(top, e), r.router_probs[ord * s.E + e]);
  }
}

TEST(MemoryView, MeasuredPointsAreKvBytes_OnTheAnalyticLine) {
  const int step = 15;
  auto v = make<MemoryView>(demoState(step));
  QCPGraph* kv = v->graph("KV measured A");
  QCPGraph* line = v->graph("KV model");
  QCPGraph* all = v->graph("KV all-attention");
  ASSERT_TRUE(kv && line && all);
  ASSERT_EQ(kv->dataCount(), step + 1);
  const hl::JambaConfig& c = demo().rec.config;
  const ModelShape s = shape();
  for (int t = 0; t <= step; ++t) {
    const auto p = kv->data()->at(t);
    EXPECT_EQ(p->key, t + 1.0);
    EXPECT_EQ(p->value, static_cast<double>(runA().records[t].kv_cache_bytes));
    // The CPU reference stores fp32: the model's line at this context is the measured value.
    EXPECT_EQ(p->value, static_cast<double>(hl::kv_cache_bytes(c, s.An, t + 1, 4)));
  }
  for (int i = 0; i < line->dataCount(); i += 8) {
    const auto p = line->data()->at(i);
    EXPECT_EQ(all->data()->at(i)->value / p->value, static_cast<double>(s.L) / s.An);
  }
}

TEST(DoraView, PointsAreRows_FitSlopeIsLeastSquares) {
  auto v = make<DoraView>(demoState(0));
  const std::vector<hl::DoraRow>& rows = demo().dora;
  ASSERT_FALSE(rows.empty());
  auto* pts = qobject_cast<QCPCurve*>([&]() -> QCPAbstractPlottable* {
    for (int i = 0; i < v->plot()->plottableCount(); ++i)
      if (v->plot()->plottable(i)->name() == "points DoRA") return v->plot()->plottable(i);
    return nullptr;
  }());
  ASSERT_NE(pts, nullptr);
  ASSERT_EQ(pts->dataCount(), static_cast<int>(rows.size()));
  for (int i = 0; i < pts->dataCount(); ++i) {
    const int row = static_cast<int>(pts->data()->at(i)->t);
    EXPECT_EQ(pts->data()->at(i)->key, rows[row].delta_d);
    EXPECT_EQ(pts->data()->at(i)->value, rows[row].delta_m);
  }
  QCPGraph* fit = v->graph("fit DoRA");
  ASSERT_NE(fit, nullptr);
  const auto a = fit->data()->at(0), b = fit->data()->at(1);
  EXPECT_NEAR((b->value - a->value) / (b->key - a->key), hl::least_squares_slope(rows), 1e-9);
}

TEST(OutliersView, DepthMaximaAndSinks_LogitBarsAreAttnMaxLogit) {
  const int step = 13;
  auto v = make<OutliersView>(demoState(step));
  const ModelShape s = shape();
  QCPGraph* mx = v->graph("max A");
  ASSERT_NE(mx, nullptr);
  for (int c = 0; c <= s.L; ++c) {
    double m = 0;  // over the run, as the curve over tokens is drawn whole
    for (size_t t = 0; t < runA().records.size(); ++t) m = std::max<double>(m, runA().records[t].resid_max_abs[c]);
    EXPECT_EQ(at(mx, c), m) << "depth " << c;
  }
  QCPBars* lb = v->bars("logit A");
  ASSERT_NE(lb, nullptr);
  for (int i = 0; i < s.An * s.nh; ++i) EXPECT_EQ(barAt(lb, i), runA().records[step].attn_max_logit[i]);
  EXPECT_EQ(v->graph("sink A")->dataCount(), 1);
}

TEST(LatencyView, StepTimesAndPercentiles_FloorFromBytesAndBandwidth) {
  const int step = 15;
  auto v = make<LatencyView>(demoState(step));
  QCPGraph* g = v->graph("step ms A");
  ASSERT_NE(g, nullptr);
  for (int t = 0; t <= step; ++t) EXPECT_DOUBLE_EQ(at(g, t), runA().records[t].step_seconds * 1e3);
  std::vector<double> itl;
  for (int t = 1; t <= step; ++t) itl.push_back(runA().records[t].step_seconds);
  const QString csv = v->csv();
  EXPECT_TRUE(csv.contains(num(percentile(itl, 99)))) << csv.toStdString();
  const double floorS = demo().model->weight_bytes_per_token() / 10e9;
  EXPECT_TRUE(csv.contains(num(floorS)));
  EXPECT_TRUE(v->figureTitle().contains("TTFT"));
}

TEST(CandidatesView, TopTenAreSoftmaxOfLogits) {
  const int step = 4;
  auto v = make<CandidatesView>(demoState(step));
  const std::vector<float>& z = runA().records[step].logits;
  std::vector<double> p(z.size());
  const double m = *std::max_element(z.begin(), z.end());
  double sum = 0;
  for (size_t i = 0; i < z.size(); ++i) sum += (p[i] = std::exp(z[i] - m));
  for (double& x : p) x /= sum;
  std::vector<int> order(z.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
  ASSERT_EQ(v->shownIds().size(), 10u);
  QCPBars* bars = v->bars("candidates A");
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(v->shownIds()[i], order[i]);
    EXPECT_NEAR(barAt(bars, i), p[order[i]], 1e-12);
  }
}

TEST(LayerRibbonView, CellsFollowTheSchedule_ClickSelectsLayer) {
  auto v = make<LayerRibbonView>(demoState(3, 5));
  const QStringList lines = v->csv().trimmed().split('\n');
  ASSERT_EQ(lines.size(), 9);  // header + 8 layers
  EXPECT_EQ(lines[3], "2,attention,dense,0");
  EXPECT_EQ(lines[6], "5,mamba,moe,1");
  std::vector<int> spy;
  QObject::connect(v.get(), &InstrumentView::layerClicked, [&](int l) { spy.push_back(l); });
  QCPAxisRect* r = v->plot()->axisRect(0);
  const QPoint pos(static_cast<int>(r->axis(QCPAxis::atBottom)->coordToPixel(6)),
                   static_cast<int>(r->axis(QCPAxis::atLeft)->coordToPixel(1.5)));
  EXPECT_TRUE(v->clickAt(pos));
  ASSERT_EQ(spy.size(), 1u);
  EXPECT_EQ(spy[0], 6);
  EXPECT_TRUE(v->tooltipAt(pos).contains("attention"));
}

TEST(Views, TooltipShowsExactValue) {
  const int step = 7;
  auto v = make<Rank1View>(demoState(step));
  QCPGraph* g = v->graph("depth A");
  const int c = 4;
  const double val = at(g, c);
  const QPoint pos(static_cast<int>(std::lround(g->keyAxis()->coordToPixel(c))),
                   static_cast<int>(std::lround(g->valueAxis()->coordToPixel(val))));
  const QString tip = v->tooltipAt(pos);
  EXPECT_TRUE(tip.contains(num(val))) << tip.toStdString() << " expected " << num(val).toStdString();
}

TEST(Views, HeatmapClick_SelectsStep_AndHeadLayer) {
  auto v = make<EntropyView>(demoState(5));
  std::vector<int> layer, head;
  QObject::connect(v.get(), &InstrumentView::layerClicked, [&](int l) { layer.push_back(l); });
  QObject::connect(v.get(), &InstrumentView::headClicked, [&](int h) { head.push_back(h); });
  HeatmapPlottable* h = v->heatmap("entropy");
  const QPoint pos(static_cast<int>(h->keyAxis()->coordToPixel(2.5)),
                   static_cast<int>(h->valueAxis()->coordToPixel(1.5)));
  EXPECT_TRUE(v->clickAt(pos));
  ASSERT_EQ(layer.size(), 1u);
  ASSERT_EQ(head.size(), 1u);
  EXPECT_EQ(layer[0], 6);
  EXPECT_EQ(head[0], 2);
  EXPECT_TRUE(v->tooltipAt(pos).contains(num(runA().records[5].attn_entropy_norm[1 * 4 + 2])));
}

TEST(Views, EveryView_NoData_StepPastEnd_DarkTheme_NoCrash) {
  for (const QString& id : viewIds()) {
    std::unique_ptr<InstrumentView> v(createView(id));
    v->resize(700, 500);
    v->setState(ViewState{});
    EXPECT_FALSE(v->hasData()) << id.toStdString();
    EXPECT_FALSE(v->csv().isEmpty()) << "a header at least";
    ViewState s = demoState(1000, 2, true, false);
    v->setState(s);
    v->applyTheme(true);
    EXPECT_EQ(v->plot()->toPixmap(700, 500).toImage().pixelColor(1, 1), theme(true).background) << id.toStdString();
    if (id != "dora") EXPECT_TRUE(v->hasData()) << id.toStdString();
    s.showDiff = true;
    s.step = 3;
    v->setState(s);
    v->applyTheme(false);
  }
}
