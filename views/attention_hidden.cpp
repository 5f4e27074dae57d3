// The attention pattern view on an SSM layer: its hidden attention (Ali, Zimerman & Wolf 2024; the
// definitions are in trace-format.md §5). The app computes M for the scrubbed token of run A on its
// engine thread and hands it over as ViewState::hidden; this file asks for it (hiddenAttentionWanted)
// and draws it: a heatmap of the query rows computed, each row's |M| normalised to sum 1 as the row
// statistics are (so its colours read like attention weights), and the current row as bars (M itself
// for one head, the mean |M| over the heads), keys aligned by token as the attention rows are.
#include <algorithm>
#include <cmath>

#include "views/attention_rows.h"
#include "views/instrument_views.h"
#include "views/token_axis_ticker.h"

namespace hl::views {

namespace {

// |row| / Σ|row| (all zero: uniform), the heatmap's colour values.
std::vector<float> shareOfRow(const std::vector<float>& row) {
  double sum = 0;
  for (float v : row) sum += std::fabs(static_cast<double>(v));
  std::vector<float> out(row.size());
  for (size_t i = 0; i < row.size(); ++i)
    out[i] = sum > 0 ? static_cast<float>(std::fabs(static_cast<double>(row[i])) / sum) : 1.0f / static_cast<float>(row.size());
  return out;
}

// The pattern computed for this view's layer and head on the current data, or null.
const HiddenPattern* patternFor(const ViewState& st, int layer, int head) {
  const HiddenPattern* hp = st.hidden;
  return hp && hp->dataVersion == st.dataVersion && hp->layer == layer && hp->head == head ? hp : nullptr;
}

QString whoText(const HiddenPattern& hp) {
  const QString unit = hp.mamba1 ? QObject::tr("channel") : QObject::tr("head");
  return hp.head < 0 ? QObject::tr("mean |M| over %1 %2s").arg(hp.heads).arg(unit) : QStringLiteral("%1 %2").arg(unit).arg(hp.head);
}

}  // namespace

bool AttentionPatternView::showsHidden() const {
  const ViewState& st = state();
  if (!st.rec || !st.hiddenOnDemand) return false;
  const ModelShape s = modelShape(st.rec->config);
  const int l = st.layer;
  if (l < 0 || l >= s.L || !s.schedule[l].has_ssm()) return false;
  return !s.schedule[l].has_attention() || preferHidden_;
}

void AttentionPatternView::setHiddenHead(int head) {
  if (head == hiddenHead_) return;
  hiddenHead_ = std::max(-1, head);
  setState(state());
}

void AttentionPatternView::chooseLayer(int layer, bool ssmPart) {
  preferHidden_ = ssmPart;
  if (layer != state().layer)
    emit layerClicked(layer);
  else
    setState(state());
}

void AttentionPatternView::rebuildHidden(QCPColorScale* scale) {
  const ViewState& st = state();
  const hl::Recording& rec = *st.rec;
  const ModelShape s = modelShape(rec.config);
  const int layer = st.layer, token = stepA();
  arrangeTop(qobject_cast<QCPLayoutGrid*>(body()->element(0, 0)), scale, false, false);
  const HiddenPattern* hp = patternFor(st, layer, hiddenHead_);
  // Ask once for what is missing; the app keeps one request in flight and sends the latest next.
  if ((!hp || hp->token != token) &&
      std::tie(askedLayer_, askedToken_, askedHead_, askedVersion_) != std::tie(layer, token, hiddenHead_, st.dataVersion)) {
    askedLayer_ = layer;
    askedToken_ = token;
    askedHead_ = hiddenHead_;
    askedVersion_ = st.dataVersion;
    emit hiddenAttentionWanted(layer, token, hiddenHead_);
  }
  const QString name = tr("%1 hidden attention").arg(layerName(s, layer));
  setHiddenCost(QString(), QString());
  if (!hp) {
    subtitle_ = tr("%1: computing token %2…").arg(name).arg(token);
    return;
  }
  if (!hp->error.empty()) {
    subtitle_ = tr("%1: %2").arg(name, QString::fromStdString(hp->error));
    return;
  }
  const Theme& t = th();
  const int T = hp->token, nReg = hp->nReg, keys = nReg + T + 1;
  const HeatmapStyle style = weightStyle();

  // The heatmap: the computed query rows (earlier ones blank), |M| as a share of its row.
  QCPAxisRect* rect = panel(0);
  auto data = std::make_shared<HeatmapData>(keys, newDataVersion());
  for (int q = 0; q < hp->firstQuery; ++q) data->addRow(nullptr, 0);
  for (const std::vector<float>& r : hp->rows) data->addOwnedRow(shareOfRow(r));
  addQueryKeyMap(rect, QStringLiteral("hidden A"), data, style, scale, T + 1, nReg,
                 nReg > 0 ? tr("keys s (%1 registers first)").arg(nReg) : tr("keys s"));
  addHLine(rect, T + 0.5, QPen(t.highlight, 1));
  if (hp->firstQuery > 0) addHLine(rect, hp->firstQuery, QPen(t.foreground, 1, Qt::DotLine));
  scale->axis()->setLabel(tr("share of the row's |M|") + colorScaleName(style));

  // The current row as bars over the keys, token j at x = j, registers left of token 0.
  QCPAxisRect* barRect = panel(4);
  QCPAxis* bx = barRect->axis(QCPAxis::atBottom);
  QCPAxis* by = barRect->axis(QCPAxis::atLeft);
  auto* bars = new QCPBars(bx, by);
  bars->setName(tr("row A"));
  QVector<double> k, v;
  const std::vector<float>& row = hp->rows.back();
  for (int i = 0; i < static_cast<int>(row.size()); ++i) {
    k << i - nReg;
    v << row[static_cast<size_t>(i)];
  }
  bars->setData(k, v, true);
  bars->setWidth(0.8);
  bars->setPen(Qt::NoPen);
  bars->setBrush(t.runA);
  if (keys <= 24) {
    QSharedPointer<QCPAxisTickerText> kt(new QCPAxisTickerText);
    for (int i = 0; i < keys; ++i) kt->addTick(i - nReg, attn::keyLabel(rec, nReg, i));
    bx->setTicker(kt);
    bx->setTickLabelRotation(keys > 10 ? 45 : 0);
  } else {
    bx->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
    bx->setTickLabelRotation(0);
  }
  bx->setLabel(tr("key s at query %1 (%2)").arg(T).arg(tokenLabel(rec, T)));
  by->setLabel(hp->head < 0 ? tr("mean |M[t, s]|") : tr("M[t, s]"));
  setHomeRange(bx, -nReg - 1, T + 1);
  by->rescale();
  if (hp->head < 0) by->setRangeLower(0);
  bars->addToLegend(panelLegend(barRect));

  // Short enough for a laptop-size panel; the row's time and the rows drawn are in the tooltip.
  subtitle_ = tr("%1, %2 · t %3: entropy %4 (%5 of ln %6), first key %7")
                  .arg(name, whoText(*hp))
                  .arg(T)
                  .arg(hp->entropy, 0, 'f', 3)
                  .arg(hp->entropyNorm, 0, 'f', 2)
                  .arg(keys)
                  .arg(hp->firstMass, 0, 'f', 3);
  if (!hp->complete) subtitle_ += tr(" · earlier rows coming");
  if (T != token) subtitle_ += tr(" · computing t %1").arg(token);
  QString tip = tr("Hidden attention (Ali, Zimerman & Wolf 2024) of run A, computed on the CPU beside the run: the "
                   "row of token %1 took %2 ms")
                    .arg(T)
                    .arg(hp->rowMs, 0, 'f', 1);
  if (hp->catchUpMs >= 1) tip += tr(", after %1 ms feeding the tokens the CPU tracker had not seen").arg(hp->catchUpMs, 0, 'f', 0);
  tip += hp->firstQuery > 0 ? tr(". Rows from query %1 on are drawn: earlier rows cost more than one redraw may "
                                 "(scrub to them to see them).")
                                  .arg(hp->firstQuery)
                            : tr(". Every query row is drawn.");
  setHiddenCost(tr("row %1 ms%2").arg(hp->rowMs, 0, 'f', 1).arg(hp->firstQuery > 0 ? tr(", rows %1–%2").arg(hp->firstQuery).arg(T) : QString()),
                tip);
}

QString AttentionPatternView::describeHiddenCell(int row, int col) const {
  const HiddenPattern* hp = patternFor(state(), state().layer, hiddenHead_);
  if (!hp || !hp->error.empty()) return QString();
  const int i = row - hp->firstQuery;
  if (i < 0 || i >= static_cast<int>(hp->rows.size()))
    return tr("query %1: not computed (rows %2..%3 are)").arg(row).arg(hp->firstQuery).arg(hp->token);
  const std::vector<float>& r = hp->rows[static_cast<size_t>(i)];
  if (col < 0 || col >= static_cast<int>(r.size())) return QString();
  const ModelShape s = modelShape(state().rec->config);
  return tr("%1 hidden attention, %2\nquery %3 (%4) → %5\nM = %6, share of the row's |M| = %7")
      .arg(layerName(s, hp->layer), whoText(*hp))
      .arg(row)
      .arg(tokenLabel(*state().rec, row), attn::keyLabel(*state().rec, hp->nReg, col), num(r[static_cast<size_t>(col)]),
           num(shareOfRow(r)[static_cast<size_t>(col)]));
}

// CSV: the rows drawn, whole: every computed query and every key of its row with M (a head) or the
// mean |M| over the heads ("mean").
QString AttentionPatternView::hiddenCsv() const {
  CsvBuilder out({"run", "layer", "head", "query", "key", "key_label", "M"});
  const HiddenPattern* hp = patternFor(state(), state().layer, hiddenHead_);
  if (!hp || !hp->error.empty() || !state().rec) return out.text();
  const QString layerText = QString::number(hp->layer);
  const QString headText = hp->head < 0 ? QStringLiteral("mean") : QString::number(hp->head);
  for (size_t i = 0; i < hp->rows.size(); ++i) {
    const QString query = QString::number(hp->firstQuery + static_cast<int>(i));
    const std::vector<float>& r = hp->rows[i];
    for (size_t key = 0; key < r.size(); ++key)
      out.addRow({"A", layerText, headText, query, QString::number(key),
                  attn::keyLabel(*state().rec, hp->nReg, static_cast<int>(key)), num(r[key])});
  }
  return out.text();
}

}  // namespace hl::views
