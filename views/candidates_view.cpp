// Next-token candidates: the top 10 of softmax(logits) at the current step (trace-format.md §3
// `logits`) as horizontal bars with their token text, run B's probabilities of the same tokens
// beside them (or B − A), and the token that actually came next marked.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "views/instrument_views.h"

namespace hl::views {

namespace {

// softmax of the logits in double (stable: subtract the max).
std::vector<double> softmax(const std::vector<float>& z) {
  std::vector<double> p(z.size());
  if (z.empty()) return p;
  const double m = *std::max_element(z.begin(), z.end());
  double s = 0;
  for (size_t i = 0; i < z.size(); ++i) s += (p[i] = std::exp(static_cast<double>(z[i]) - m));
  for (double& v : p) v /= s;
  return p;
}

std::vector<int> topIds(const std::vector<double>& p, int k) {
  std::vector<int> idx(p.size());
  std::iota(idx.begin(), idx.end(), 0);
  k = std::min<int>(k, static_cast<int>(p.size()));
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  idx.resize(static_cast<size_t>(k));
  return idx;
}

bool hasLogits(const hl::Run* run) {
  return run && !run->records.empty() && !run->records[0].logits.empty();
}

// Token text in quotes so leading and lone spaces show; "#id" without a vocabulary.
QString idText(const ViewState& st, int id) {
  if (st.vocab && id >= 0 && id < static_cast<int>(st.vocab->size()) && !(*st.vocab)[id].empty())
    return QStringLiteral("“%1”").arg(QString::fromStdString((*st.vocab)[id]));
  return QStringLiteral("#%1").arg(id);
}

}  // namespace

bool CandidatesView::hasData() const {
  return hasRecords(state()) && hasLogits(state().a);
}

void CandidatesView::rebuild() {
  noDataReason_ = tr("the records carry no logits");
  clearPlot();
  ids_.clear();
  styleAll();
  if (!hasData()) return;
  const Theme& t = th();
  const hl::Run* a = state().a;
  const hl::Run* b = hasLogits(state().b) ? state().b : nullptr;
  const bool diff = diffMode() && b;
  const int sa = stepA(), sb = b ? stepB() : -1;
  const std::vector<double> pa = softmax(a->records[sa].logits);
  const std::vector<double> pb = b ? softmax(b->records[sb].logits) : std::vector<double>();
  ids_ = topIds(pa, kTop);
  if (b)
    for (int id : topIds(pb, kTop))
      if (std::find(ids_.begin(), ids_.end(), id) == ids_.end() && id < static_cast<int>(pa.size())) ids_.push_back(id);
  // The token fed after this step, if any.
  int next = -1;
  if (sa + 1 < static_cast<int>(a->records.size())) next = a->records[sa + 1].token_id;
  subtitle_ = tr("entropy %1 nats").arg(a->records[sa].logit_entropy, 0, 'f', 3);

  QCPAxisRect* r = panel(0);
  QCPAxis* key = r->axis(QCPAxis::atLeft);
  QCPAxis* val = r->axis(QCPAxis::atBottom);
  key->setRangeReversed(true);
  val->setLabel(diff ? tr("probability B − A") : tr("probability"));
  QSharedPointer<QCPAxisTickerText> tk(new QCPAxisTickerText);
  for (size_t i = 0; i < ids_.size(); ++i)
    tk->addTick(static_cast<double>(i),
                (ids_[i] == next ? QStringLiteral("→ ") : QString()) + idText(state(), ids_[i]));
  key->setTicker(tk);
  key->grid()->setVisible(false);
  auto* group = new QCPBarsGroup(plot());
  auto addBars = [&](const QString& name, const QColor& c, bool isB, auto value) {
    auto* bars = new QCPBars(key, val);
    bars->setName(name);
    for (size_t i = 0; i < ids_.size(); ++i) bars->addData(static_cast<double>(i), value(ids_[i]));
    styleRunBars(bars, c, isB, 0.4);
    bars->setBarsGroup(group);
    bars->addToLegend(panelLegend(r));
  };
  auto probOf = [](const std::vector<double>& p, int id) { return id < static_cast<int>(p.size()) ? p[id] : 0.0; };
  if (diff) {
    addBars("candidates B-A", t.diff, false, [&](int id) { return probOf(pb, id) - probOf(pa, id); });
  } else {
    addBars("candidates A", t.runA, false, [&](int id) { return probOf(pa, id); });
    if (b) addBars("candidates B", t.runB, true, [&](int id) { return probOf(pb, id); });
  }
  key->setRange(-0.6, ids_.size() - 0.4);
  val->rescale();
  if (!diff) val->setRange(0, std::min(1.0, std::max(1e-9, val->range().upper * 1.3)));
  if (!diff)
    for (size_t i = 0; i < ids_.size(); ++i)
      addLabel(r, probOf(pa, ids_[i]), static_cast<double>(i) - 0.2,
               QStringLiteral(" %1").arg(QString::number(probOf(pa, ids_[i]), 'g', 4)),
               Qt::AlignLeft | Qt::AlignVCenter);
}

QString CandidatesView::describePoint(QCPAbstractPlottable* p, int index) const {
  auto* bars = qobject_cast<QCPBars*>(p);
  if (!bars) return InstrumentView::describePoint(p, index);
  const auto it = bars->data()->at(index);
  const int row = static_cast<int>(std::lround(it->key));
  if (row < 0 || row >= static_cast<int>(ids_.size())) return InstrumentView::describePoint(p, index);
  return tr("%1\ntoken %2 (id %3)\np = %4")
      .arg(bars->name(), idText(state(), ids_[row]))
      .arg(ids_[row])
      .arg(num(it->value));
}

// CSV: per run, the shown token ids at the current step with their probability and logit.
QString CandidatesView::csv() const {
  CsvBuilder out({"run", "step", "rank", "token_id", "token_text", "probability", "logit"});
  if (!hasData()) return out.text();
  auto dump = [&](const hl::Run* run, const char* label) {
    if (!hasLogits(run)) return;
    const int step = effectiveStep(state(), run);
    const std::vector<float>& z = run->records[step].logits;
    const std::vector<double> p = softmax(z);
    for (size_t i = 0; i < ids_.size(); ++i) {
      const int id = ids_[i];
      if (id >= static_cast<int>(p.size())) continue;
      out.addRow({label, QString::number(step), QString::number(i), QString::number(id), idText(state(), id),
                  num(p[id]), num(z[id])});
    }
  };
  dump(state().a, "A");
  dump(state().b, "B");
  return out.text();
}

}  // namespace hl::views
