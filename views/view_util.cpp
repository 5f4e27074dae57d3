// Themes, number formatting, percentiles, CSV and label helpers of the views (see view_util.h),
// and the ModelShape / step helpers of view_state.h.
#include "views/view_util.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

namespace hl::views {

// ---- view_state.h ----

namespace {
int ordinalOf(const std::vector<int>& v, int layer) {
  auto it = std::lower_bound(v.begin(), v.end(), layer);
  return it != v.end() && *it == layer ? static_cast<int>(it - v.begin()) : -1;
}
}  // namespace

int ModelShape::attnOrdinal(int layer) const {
  return layer >= 0 && layer < L ? static_cast<int>(schedule[layer].attn_index) : -1;
}
int ModelShape::mambaOrdinal(int layer) const {
  return layer >= 0 && layer < L ? static_cast<int>(schedule[layer].ssm_index) : -1;
}
int ModelShape::moeOrdinal(int layer) const {
  return layer >= 0 && layer < L ? static_cast<int>(schedule[layer].moe_index) : -1;
}

int layerOrFirst(const std::vector<int>& layers, int layer) {
  if (layers.empty()) return -1;
  return ordinalOf(layers, layer) >= 0 ? layer : layers[0];
}

ModelShape modelShape(const hl::JambaConfig& c) {
  ModelShape s;
  s.schedule = hl::LayerSchedule::from_config(c);
  const hl::LayerParams& p = s.schedule.params();
  auto ints = [](const std::vector<int64_t>& v) { return std::vector<int>(v.begin(), v.end()); };
  s.L = static_cast<int>(s.schedule.size());
  s.nh = static_cast<int>(p.attn.heads);
  s.nkv = static_cast<int>(p.attn.kv_heads);
  s.headDim = static_cast<int>(p.attn.head_dim);
  s.E = static_cast<int>(p.ffn.experts);
  s.k = static_cast<int>(p.ffn.top_k);
  s.Di = static_cast<int>(p.ssm.d_inner);
  s.dState = static_cast<int>(p.ssm.d_state);
  s.dConv = static_cast<int>(p.ssm.d_conv);
  s.V = static_cast<int>(c.vocab_size);
  s.attnLayers = ints(s.schedule.attention_layers());
  s.mambaLayers = ints(s.schedule.ssm_layers());
  s.moeLayers = ints(s.schedule.moe_layers());
  s.An = static_cast<int>(s.schedule.num_attention());
  s.Mn = static_cast<int>(s.schedule.num_ssm());
  s.Xn = static_cast<int>(s.schedule.num_moe());
  return s;
}

int runRegisters(const hl::Run& run, const ModelShape& s) {
  // attn_rows of record t holds (A_n, nh, n_reg + t + 2): trust it over the settings when present.
  if (s.An > 0 && s.nh > 0 && !run.records.empty() && !run.records[0].attn_rows.empty()) {
    const int64_t per = static_cast<int64_t>(run.records[0].attn_rows.size()) / (int64_t{s.An} * s.nh);
    const int64_t t0 = run.records[0].position;
    if (per - t0 - 2 >= 0) return static_cast<int>(per - t0 - 2);
  }
  return std::max(0, run.settings.registers_used);
}

int effectiveStep(const ViewState& st, const hl::Run* run) {
  if (!run || run->records.empty()) return -1;
  const int n = static_cast<int>(run->records.size());
  if (st.step < 0 || st.step >= n) return n - 1;
  return st.step;
}

bool hasRecords(const ViewState& st) {
  return st.rec && st.a && !st.a->records.empty();
}

// ---- themes ----

const Theme& theme(bool dark) {
  static const Theme light = [] {
    Theme t;
    t.dark = false;
    t.background = QColor(255, 255, 255);
    t.axisRectBg = QColor(255, 255, 255);
    t.foreground = QColor(30, 30, 30);
    t.grid = QColor(215, 215, 215);
    t.subGrid = QColor(235, 235, 235);
    t.runA = QColor(31, 119, 180);
    t.runB = QColor(214, 39, 40);
    t.diff = QColor(44, 160, 44);
    t.highlight = QColor(255, 127, 14);
    t.band = QColor(44, 160, 44, 40);
    t.attention = QColor(230, 145, 56);
    t.mamba = QColor(76, 114, 176);
    t.dense = QColor(200, 200, 200);
    t.moe = QColor(129, 114, 178);
    t.floorLine = QColor(90, 90, 90);
    t.deviceLine = QColor(160, 30, 30);
    t.series = {QColor(31, 119, 180),  QColor(255, 127, 14), QColor(44, 160, 44),   QColor(214, 39, 40),
                QColor(148, 103, 189), QColor(140, 86, 75),  QColor(227, 119, 194), QColor(127, 127, 127),
                QColor(188, 189, 34),  QColor(23, 190, 207)};
    return t;
  }();
  static const Theme darkT = [] {
    Theme t;
    t.dark = true;
    t.background = QColor(30, 31, 34);
    t.axisRectBg = QColor(36, 37, 41);
    t.foreground = QColor(220, 220, 220);
    t.grid = QColor(70, 72, 78);
    t.subGrid = QColor(52, 54, 58);
    t.runA = QColor(100, 170, 240);
    t.runB = QColor(250, 110, 100);
    t.diff = QColor(120, 220, 120);
    t.highlight = QColor(255, 190, 60);
    t.band = QColor(120, 220, 120, 45);
    t.attention = QColor(240, 165, 80);
    t.mamba = QColor(100, 140, 210);
    t.dense = QColor(95, 97, 104);
    t.moe = QColor(160, 140, 215);
    t.floorLine = QColor(190, 190, 190);
    t.deviceLine = QColor(255, 100, 100);
    t.series = {QColor(100, 170, 240), QColor(255, 160, 60),  QColor(110, 210, 110), QColor(250, 110, 100),
                QColor(190, 150, 240), QColor(200, 150, 130), QColor(245, 150, 215), QColor(170, 170, 170),
                QColor(220, 220, 80),  QColor(80, 220, 230)};
    return t;
  }();
  return dark ? darkT : light;
}

QColor seriesColor(const Theme& t, int i) {
  if (t.series.isEmpty()) return t.foreground;
  return t.series[((i % t.series.size()) + t.series.size()) % t.series.size()];
}

QPen runPen(const QColor& c, bool runB, double width) {
  QPen p(c, width);
  if (runB) p.setStyle(Qt::DashLine);
  return p;
}

// ---- formatting ----

QString num(double v) {
  if (std::isnan(v)) return QStringLiteral("nan");
  if (std::isinf(v)) return v > 0 ? QStringLiteral("inf") : QStringLiteral("-inf");
  return QString::number(v, 'g', 9);
}

QString humanBytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  double v = bytes;
  while (std::fabs(v) >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  return u == 0 ? QString::number(bytes, 'f', 0) + " B" : QString::number(v, 'f', 2) + " " + units[u];
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const double pos = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  const double f = pos - static_cast<double>(lo);
  return v[lo] + (v[hi] - v[lo]) * f;
}

CsvBuilder::CsvBuilder(const QStringList& header) {
  QStringList cells;
  for (const QString& h : header) cells << cell(h);
  text_ = cells.join(',') + '\n';
}

void CsvBuilder::addRow(const QStringList& cells) {
  QStringList out;
  out.reserve(cells.size());
  for (const QString& c : cells) out << cell(c);
  text_ += out.join(',') + '\n';
  ++rows_;
}

QString CsvBuilder::text() const {
  return text_;
}

QString CsvBuilder::cell(const QString& s) {
  if (!s.contains(',') && !s.contains('"') && !s.contains('\n') && !s.contains('\r')) return s;
  QString q = s;
  q.replace('"', "\"\"");
  return '"' + q + '"';
}

uint64_t newDataVersion() {
  static std::atomic<uint64_t> v{1};
  return v++;
}

QString countOf(long long n, const QString& one, const QString& many) {
  return QStringLiteral("%1 %2").arg(n).arg(n == 1 || n == -1 ? one : many);
}

int longestRun(const hl::Run* a, const hl::Run* b) {
  size_t n = 0;
  for (const hl::Run* r : {a, b})
    if (r) n = std::max(n, r->records.size());
  return static_cast<int>(n);
}

QString tokenLabel(const hl::Recording& rec, int t) {
  if (t >= 0 && t < static_cast<int>(rec.token_text.size()) && !rec.token_text[t].empty())
    return QString::fromStdString(rec.token_text[t]);
  if (t >= 0 && t < static_cast<int>(rec.tokens.size())) return QStringLiteral("#%1").arg(rec.tokens[t]);
  for (const hl::Run& r : rec.runs)
    if (t >= 0 && t < static_cast<int>(r.records.size())) return QStringLiteral("#%1").arg(r.records[t].token_id);
  return QStringLiteral("#?");
}

QString layerName(const ModelShape& s, int layer) {
  const bool attn = s.attnOrdinal(layer) >= 0;
  const hl::MixerKind k =
      layer >= 0 && layer < s.schedule.size() ? s.schedule[layer].mixer : hl::MixerKind::Mamba1;
  return QStringLiteral("L%1 %2").arg(layer).arg(k == hl::MixerKind::Parallel ? "attn∥ssm"
                                                 : attn                         ? "attn"
                                                 : k == hl::MixerKind::Mamba2 ? "mamba-2"
                                                 : k == hl::MixerKind::None   ? "mlp"
                                                                              : "mamba");
}

hl::RunStats& RunStatsCache::of(const hl::Run& run, const ModelShape& s) {
  auto it = std::find_if(runs_.begin(), runs_.end(), [&](const auto& e) { return e.first == &run; });
  if (it == runs_.end()) it = runs_.insert(runs_.end(), {&run, std::make_unique<hl::RunStats>()});
  it->second->update(run, hl::RunStats::Shape{s.E, s.k, s.Xn, s.L});
  return *it->second;
}

void RunStatsCache::keepOnly(const hl::Run* a, const hl::Run* b) {
  runs_.erase(std::remove_if(runs_.begin(), runs_.end(), [&](const auto& e) { return e.first != a && e.first != b; }),
              runs_.end());
}

}  // namespace hl::views
