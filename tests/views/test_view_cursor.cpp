// Scrubbing moves a cursor, it does not cut the curves (issue 17 finding 11): with the views
// scrubbed to an early token, every series and heatmap over tokens still holds every record of its
// run (B − A: the tokens both runs have), a line marks the scrubbed token, the home range spans the
// longer run, and the CSV holds every token. Run A is cut shorter than B so that a series capped at
// A's length, or at the step, shows.
#include <gtest/gtest.h>

#include <QSet>
#include <cmath>
#include <memory>

#include "tests/views/view_test_util.h"
#include "views/instrument_views.h"
#include "views/view_registry.h"

using hl::test::demo;
using namespace hl::views;

namespace {

constexpr int kStep = 5, kTokensA = 12, kTokensB = 16;

// A line of `rect` at x = v (vertical) or y = v (horizontal).
bool hasLine(const InstrumentView& v, QCPAxisRect* rect, double at, bool vertical) {
  for (int i = 0; i < v.plot()->itemCount(); ++i) {
    auto* l = qobject_cast<QCPItemStraightLine*>(v.plot()->item(i));
    if (!l || l->clipAxisRect() != rect) continue;
    const QPointF p1 = l->point1->coords(), p2 = l->point2->coords();
    if (vertical ? p1.x() == at && p2.x() == at : p1.y() == at && p2.y() == at) return true;
  }
  return false;
}

// Records the series of a run holds: B − A spans the tokens both runs have.
int expectedPoints(const QString& name) {
  if (name.endsWith("B-A")) return std::min(kTokensA, kTokensB);
  return name.endsWith(" B") ? kTokensB : kTokensA;
}

struct Drawn {
  const char* view;
  QStringList graphs, heatmaps;  // heatmaps: one row per token
};

}  // namespace

TEST(Cursor, ScrubbedViews_DrawEveryToken_MarkTheStep_CsvHoldsEveryToken) {
  hl::Recording rec = demo().rec;
  ASSERT_EQ(static_cast<int>(rec.runs[1].records.size()), kTokensB);
  rec.runs[0].records.resize(kTokensA);
  const ModelShape s = modelShape(rec.config);
  ViewState st = hl::test::demoState(kStep, -1, true);
  st.rec = &rec;
  st.a = &rec.runs[0];
  st.b = &rec.runs[1];
  const QString attnL = layerName(s, s.attnLayers[0]) + " ";
  const QString logitL = QStringLiteral("max logit L%1 ").arg(s.attnLayers[0]);
  for (bool diff : {false, true}) {
    st.showDiff = diff;
    const QStringList runs = diff ? QStringList{"B-A"} : QStringList{"A", "B"};
    auto each = [&](const QStringList& stems) {
      QStringList out;
      for (const QString& stem : stems)
        for (const QString& r : runs) out << stem + r;
      return out;
    };
    const std::vector<Drawn> views = {
        {"rank1", each({"final "}), {}},
        {"entropy", each({attnL}), {}},
        {"ssm_delta", each({"mean ", "retained "}), {diff ? "delta B-A" : "delta A"}},
        {"latency", each({"step ms "}), {}},
        {"outliers", each({"resid ", logitL}), {}},
        {"router", each({"balance ", "z-loss ", "max load "}), {}},
        {"memory", {"KV measured A", "KV measured B"}, {}},  // log axes: A and B even in B − A mode
        {"attention", {}, each({"keys ", "null "})},
    };
    for (const Drawn& d : views) {
      const std::string where = std::string(d.view) + (diff ? " B-A" : "");
      std::unique_ptr<InstrumentView> v(createView(d.view));
      v->resize(900, 600);
      v->setState(st);
      ASSERT_TRUE(v->hasData()) << where;
      for (const QString& name : d.graphs) {
        QCPGraph* g = v->graph(name);
        ASSERT_NE(g, nullptr) << where << ": " << name.toStdString();
        EXPECT_EQ(g->dataCount(), expectedPoints(name)) << where << ": " << name.toStdString();
        // Memory's axis is the context (registers + position + 1), not the token index.
        const bool memory = QString(d.view) == "memory";
        const double cursor = memory ? rec.runs[0].records[kStep].position + 1.0 : kStep;
        EXPECT_TRUE(hasLine(*v, g->keyAxis()->axisRect(), cursor, true)) << where << ": " << name.toStdString();
        if (!memory) EXPECT_GE(g->keyAxis()->range().upper, kTokensB - 1) << where << ": " << name.toStdString();
      }
      for (const QString& name : d.heatmaps) {
        HeatmapPlottable* h = v->heatmap(name);
        ASSERT_NE(h, nullptr) << where << ": " << name.toStdString();
        EXPECT_EQ(h->heatmap()->rows(), expectedPoints(name)) << where << ": " << name.toStdString();
        EXPECT_TRUE(hasLine(*v, h->keyAxis()->axisRect(), kStep + 0.5, false)) << where << ": " << name.toStdString();
        EXPECT_GE(h->valueAxis()->range().upper, expectedPoints(name)) << where << ": " << name.toStdString();
      }
    }
  }

  // The CSV of every view with one row per token holds every token of each run.
  st.showDiff = false;
  for (const auto& [id, column] : std::vector<std::pair<QString, QString>>{{"rank1", "token"},
                                                                           {"entropy", "token"},
                                                                           {"ssm_delta", "token"},
                                                                           {"latency", "token"},
                                                                           {"memory", "token"},
                                                                           {"attention", "query"}}) {
    std::unique_ptr<InstrumentView> v(createView(id));
    v->setState(st);
    const QStringList lines = v->csv().split('\n', Qt::SkipEmptyParts);
    ASSERT_GT(lines.size(), 1) << id.toStdString();
    const int col = static_cast<int>(lines[0].split(',').indexOf(column));
    ASSERT_GE(col, 0) << id.toStdString();
    QSet<int> tokensA, tokensB;
    for (int i = 1; i < lines.size(); ++i) {
      const QStringList c = lines[i].split(',');
      (c[0] == "A" ? tokensA : tokensB).insert(c[col].toInt());
    }
    EXPECT_EQ(tokensA.size(), kTokensA) << id.toStdString();
    EXPECT_EQ(tokensB.size(), kTokensB) << id.toStdString();
  }
  // Outliers: the maxima span the run, the last column is the value at the scrubbed token.
  std::unique_ptr<InstrumentView> out(createView("outliers"));
  out->setState(st);
  const QStringList row = out->csv().split('\n')[1].split(',');  // run A, resid_max_abs at depth 0
  double mx = 0;
  for (int t = 0; t < kTokensA; ++t) mx = std::max<double>(mx, rec.runs[0].records[t].resid_max_abs[0]);
  EXPECT_EQ(row[5], num(mx));
  EXPECT_EQ(row.last(), num(rec.runs[0].records[kStep].resid_max_abs[0]));
}
