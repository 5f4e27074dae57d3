// KV memory against context (Lieber et al. 2024, Gu & Dao 2023), log-log: the measured
// kv_cache_bytes and ssm_state_bytes of the run as points on the analytic lines of this model
// (engine/probes/memory.h at the element size the run stores), its all-attention counterfactual
// (every layer attention), the pure-Mamba stack (flat state, no KV cache) and the device memory.
#include <algorithm>
#include <cmath>

#include "engine/probes/memory.h"
#include "views/instrument_views.h"

namespace hl::views {

namespace {

struct Sizes {
  int64_t kvElem = 2, stateElem = 4;  // bytes per element the run stores
};

// Element sizes from the first record: kv = 2·A_n·nkv·hd·(n_reg + 1)·b, state = M_n·Di·(d_conv + d_state)·b.
Sizes elementSizes(const hl::TokenTrace& r0, const ModelShape& s, int nReg) {
  Sizes z;
  const int64_t kvUnit = int64_t{2} * s.An * s.nkv * s.headDim * (nReg + r0.position + 1);
  if (kvUnit > 0 && r0.kv_cache_bytes > 0) z.kvElem = std::max<int64_t>(1, r0.kv_cache_bytes / kvUnit);
  const int64_t stUnit = int64_t{s.Mn} * s.Di * (s.dConv + s.dState);
  if (stUnit > 0 && r0.ssm_state_bytes > 0) z.stateElem = std::max<int64_t>(1, r0.ssm_state_bytes / stUnit);
  return z;
}

}  // namespace

void MemoryView::rebuild() {
  clearPlot();
  styleAll();
  if (!hasData()) return;
  const Theme& t = th();
  const hl::JambaConfig& c = state().rec->config;
  const ModelShape s = modelShape(c);
  const hl::Run* a = state().a;
  const hl::Run* b = state().b && !state().b->records.empty() ? state().b : nullptr;
  const int sa = stepA();
  const int nRegA = runRegisters(*a, s);
  const Sizes z = elementSizes(a->records[0], s, nRegA);
  const double T = static_cast<double>(nRegA + a->records.size());
  const double xmax = std::min(1e8, std::max<double>(static_cast<double>(c.max_position_embeddings), 8 * T));
  subtitle_ = tr("KV at %1 B/element, state at %2 B/element").arg(z.kvElem).arg(z.stateElem);
  if (state().showDiff && b) subtitle_ += tr(" (B − A is not drawn on log axes: A and B overlaid)");

  QCPAxisRect* r = panel(0);
  QCPAxis* x = r->axis(QCPAxis::atBottom);
  QCPAxis* y = r->axis(QCPAxis::atLeft);
  for (QCPAxis* ax : {x, y}) {
    ax->setScaleType(QCPAxis::stLogarithmic);
    QSharedPointer<QCPAxisTickerLog> lt(new QCPAxisTickerLog);
    lt->setLogBase(10);
    ax->setTicker(lt);
    ax->setNumberFormat("eb");
    ax->setNumberPrecision(0);
  }
  x->setLabel(tr("context (tokens, registers included)"));
  y->setLabel(tr("bytes"));

  // Analytic lines on a log grid of contexts.
  const int kPoints = 64;
  QVector<double> xs;
  for (int i = 0; i <= kPoints; ++i) xs << std::pow(10.0, std::log10(xmax) * i / kPoints);
  auto line = [&](const QString& name, const QColor& col, Qt::PenStyle style, auto f) {
    QCPGraph* g = addGraph(r, name, col);
    QPen p(col, 1.8, style);
    g->setPen(p);
    QVector<double> ys;
    for (double v : xs) ys << f(v);
    g->setData(xs, ys, true);
    return g;
  };
  // The KV cache is linear in the context: bytes per token (memory.h at one token) times the context.
  const double kvTok = static_cast<double>(hl::kv_cache_bytes(c, s.An, 1, z.kvElem));
  const double kvTokAll = static_cast<double>(hl::kv_cache_bytes(c, s.L, 1, z.kvElem));
  if (s.An > 0) line("KV model", t.runA, Qt::SolidLine, [&](double n) { return kvTok * n; });
  line("KV all-attention", t.attention, Qt::SolidLine, [&](double n) { return kvTokAll * n; });
  if (s.Mn > 0)
    line("state model", t.mamba, Qt::DashDotLine,
         [&](double) { return static_cast<double>(hl::ssm_state_bytes(c, s.Mn, z.stateElem)); });
  line("state all-Mamba", t.mamba, Qt::DotLine,
       [&](double) { return static_cast<double>(hl::ssm_state_bytes(c, s.L, z.stateElem)); });
  if (state().hw.deviceMemoryBytes > 0) {
    addHLine(r, state().hw.deviceMemoryBytes, QPen(t.deviceLine, 1.5, Qt::DashLine));
    addLabel(r, 1.5, state().hw.deviceMemoryBytes,
             tr("%1 memory %2")
                 .arg(QString::fromStdString(state().hw.deviceName.empty() ? "device" : state().hw.deviceName),
                      humanBytes(state().hw.deviceMemoryBytes)),
             Qt::AlignLeft | Qt::AlignBottom)
        ->setColor(t.deviceLine);
  }

  // Measured points of every token (at most ~256, log-spaced; tooltips give the exact bytes); the
  // current context is marked below.
  auto measured = [&](const hl::Run* run, const QString& label, const QColor& col, bool isB) {
    const int nReg = runRegisters(*run, s);
    const int n = static_cast<int>(run->records.size());
    std::vector<int> idx;
    for (int i = 0; i < n; ++i) {
      if (i < 64 || i == n - 1 || (i + 1.0) / (idx.back() + 1.0) > 1.03) idx.push_back(i);
    }
    QCPGraph* kv = addGraph(r, "KV measured " + label, col, isB);
    QCPGraph* st = addGraph(r, "state measured " + label, t.mamba, isB);
    for (QCPGraph* g : {kv, st}) g->setLineStyle(QCPGraph::lsNone);
    kv->setScatterStyle(QCPScatterStyle(isB ? QCPScatterStyle::ssCircle : QCPScatterStyle::ssDisc, col, 4));
    st->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssSquare, t.mamba, 3));
    for (int i : idx) {
      const hl::TokenTrace& rr = run->records[i];
      const double ctx = nReg + rr.position + 1;
      if (rr.kv_cache_bytes > 0) kv->addData(ctx, static_cast<double>(rr.kv_cache_bytes));
      if (rr.ssm_state_bytes > 0) st->addData(ctx, static_cast<double>(rr.ssm_state_bytes));
    }
  };
  measured(a, "A", t.runA, false);
  if (b) measured(b, "B", t.runB, true);

  // The current context, with the model against the all-attention counterfactual.
  const double ctx = nRegA + a->records[sa].position + 1;
  addVLine(r, ctx, QPen(t.highlight, 1.5));
  const double kvNow = static_cast<double>(a->records[sa].kv_cache_bytes);
  const double kvAll = static_cast<double>(hl::kv_cache_bytes(c, s.L, static_cast<int64_t>(ctx), z.kvElem));
  addLabel(r, ctx, kvAll, tr(" t=%1: KV %2 vs %3 all-attention").arg(sa).arg(humanBytes(kvNow), humanBytes(kvAll)),
           Qt::AlignLeft | Qt::AlignBottom);
  const double atMax = static_cast<double>(c.max_position_embeddings);
  if (atMax > ctx * 4 && s.An > 0)
    addLabel(r, atMax, static_cast<double>(hl::kv_cache_bytes(c, s.An, c.max_position_embeddings, z.kvElem)),
             tr("%1 at %2 tokens")
                 .arg(humanBytes(static_cast<double>(hl::kv_cache_bytes(c, s.An, c.max_position_embeddings, z.kvElem))))
                 .arg(c.max_position_embeddings),
             Qt::AlignRight | Qt::AlignTop);

  setHomeRange(x, 1, xmax);
  double lo = 1e300, hi = 0;
  for (int i = 0; i < plot()->plottableCount(); ++i) {
    bool found = false;
    const QCPRange vr = plot()->plottable(i)->getValueRange(found, QCP::sdPositive);
    if (found) {
      lo = std::min(lo, vr.lower);
      hi = std::max(hi, vr.upper);
    }
  }
  if (state().hw.deviceMemoryBytes > 0) hi = std::max(hi, state().hw.deviceMemoryBytes);
  if (hi > 0) setHomeRange(y, std::max(1.0, lo / 3), hi * 3);
  if (!r->property("hlZoom").toBool()) {
    installZoomPan(plot(), r, Qt::Horizontal | Qt::Vertical);
    r->setProperty("hlZoom", true);
  }
  QCPLegend* lg = panelLegend(r);
  for (int i = 0; i < plot()->plottableCount(); ++i) plot()->plottable(i)->addToLegend(lg);
}

// CSV: per run, per token: context, measured bytes, and the analytic lines at that context.
QString MemoryView::csv() const {
  CsvBuilder out({"run", "token", "context", "kv_cache_bytes", "ssm_state_bytes", "kv_model", "kv_all_attention",
                  "state_all_mamba"});
  if (!hasData()) return out.text();
  const hl::JambaConfig& c = state().rec->config;
  const ModelShape s = modelShape(c);
  auto dump = [&](const hl::Run* run, const char* label) {
    if (!run || run->records.empty()) return;
    const int nReg = runRegisters(*run, s);
    const Sizes z = elementSizes(run->records[0], s, nReg);
    for (size_t i = 0; i < run->records.size(); ++i) {
      const hl::TokenTrace& r = run->records[i];
      const int64_t ctx = nReg + r.position + 1;
      out.addRow({label, QString::number(i), QString::number(ctx), QString::number(r.kv_cache_bytes),
                  QString::number(r.ssm_state_bytes), QString::number(hl::kv_cache_bytes(c, s.An, ctx, z.kvElem)),
                  QString::number(hl::kv_cache_bytes(c, s.L, ctx, z.kvElem)),
                  QString::number(hl::ssm_state_bytes(c, s.L, z.stateElem))});
    }
  };
  dump(state().a, "A");
  dump(state().b, "B");
  return out.text();
}

}  // namespace hl::views
