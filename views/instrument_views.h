// The instrument views of issue 5 item 3, one class per instrument, each following its seed figure
// (see reference()). Every view overlays run A (solid) and run B (dashed), can draw B − A, shows
// the current step and the selected layer, and exports its figure and CSV (InstrumentView).
// Implementations: one .cpp per view in this folder.
#pragma once
#include <memory>
#include <vector>

#include "views/instrument_view.h"

namespace hl::views {

// Which layers are attention or Mamba mixers, dense MLP or MoE feed-forwards (Lieber et al. 2024):
// the whole ribbon with block boundaries, and the block of the selected layer expanded.
class LayerRibbonView : public InstrumentView {
  Q_OBJECT
 public:
  using InstrumentView::InstrumentView;
  QString viewId() const override { return QStringLiteral("ribbon"); }
  QString title() const override { return tr("Layer ribbon"); }
  QString reference() const override { return QStringLiteral("Lieber et al. 2024 (Jamba)"); }
  bool hasData() const override;
  bool followsStep() const override { return false; }
  QString csv() const override;
  QString tooltipAt(const QPoint& pos) const override;

 protected:
  void rebuild() override;
  // The cell texts are fitted to the cell sizes: a new size redraws them (once per burst of resizes).
  void resizeEvent(QResizeEvent* ev) override;

 private:
  bool refitPending_ = false;
};

// attn_entropy_norm: layers × heads heatmap at the current token, entropy against layer and
// per-layer curves over tokens with the healthy band (Zhai et al. 2023).
class EntropyView : public InstrumentView {
  Q_OBJECT
 public:
  using InstrumentView::InstrumentView;
  QString viewId() const override { return QStringLiteral("entropy"); }
  QString title() const override { return tr("Attention entropy"); }
  QString reference() const override { return QStringLiteral("Zhai et al. 2023 (attention entropy collapse)"); }
  bool hasData() const override;
  QString csv() const override;
  // The healthy band of normalized entropy: below is collapse (→ 0), above over-smoothing (→ 1).
  static constexpr double kBandLow = 0.2, kBandHigh = 0.9;

 protected:
  void rebuild() override;
  QString describeCell(HeatmapPlottable* h, int row, int col) const override;
  void handleClick(QCPAxisRect* rect, double x, double y) override;
};

// The selected attention layer and head: rows = query tokens, columns = keys (registers first), the
// null share as an extra column; the current row as bars over keys plus the null slot (Miller 2023; Xiao et al. 2023).
// A bar over the plot picks the head, the colour scale (linear, log, power γ; the colour bar names
// it) and an all-heads grid of the layer (click a head to focus it); both token axes carry the
// token text once zoomed in far enough (wheel / drag; double-click or "reset zoom" restores).
// An SSM layer shows its hidden attention instead (Ali, Zimerman & Wolf 2024): rows of M for a head
// or the mean |M| over the heads, computed by the app on demand for the scrubbed token.
class AttentionHeadGrid;
class AttentionPatternView : public InstrumentView {
  Q_OBJECT
 public:
  explicit AttentionPatternView(QWidget* parent = nullptr);
  QString viewId() const override { return QStringLiteral("attention"); }
  QString title() const override { return tr("Attention pattern"); }
  QString reference() const override { return QStringLiteral("Xiao et al. 2023 (sinks), Miller 2023 (softmax-1), Darcet et al. 2023 (registers)"); }
  bool hasData() const override;
  QString csv() const override;
  int shownLayer() const;  // decoder layer index drawn (the selected one if it is attention)
  int shownHead() const;   // head drawn (the selected one, clamped to the layer's heads)
  // The colour scale of the weight heatmaps (B − A always uses a linear diverging map).
  void setColorScale(ColorScale scale, double gamma = 0.5);
  HeatmapStyle weightStyle() const;
  // The all-heads grid instead of the one-head figure; a click on a head emits headClicked and
  // returns to the one-head figure.
  void setAllHeads(bool on);
  bool allHeads() const { return allHeads_; }
  AttentionHeadGrid* headGrid() const { return grid_; }
  unsigned dependsOn() const override { return InstrumentView::dependsOn() | change::Hidden; }
  // The selected layer's SSM hidden attention (Ali, Zimerman & Wolf 2024) instead of attention heads:
  // an SSM layer without attention, or a parallel layer (Falcon-H1) whose SSM part the layer box chose.
  bool showsHidden() const;
  // The hidden attention's head (Mamba-1: channel); −1: the mean |M| over them.
  int hiddenHead() const { return hiddenHead_; }
  void setHiddenHead(int head);
  // Chooses a decoder layer from the layer box: its SSM part (hidden attention) or its attention.
  void chooseLayer(int layer, bool ssmPart);

 signals:
  // The hidden attention of (layer, token, head) is needed; the app computes it (ViewState::hidden).
  void hiddenAttentionWanted(int layer, int token, int head);

 protected:
  void rebuild() override;
  QString describeCell(HeatmapPlottable* h, int row, int col) const override;
  void handleClick(QCPAxisRect* rect, double x, double y) override;

 private:
  struct DiffCache;
  struct Controls;
  void buildControls();
  void syncControls();
  void rebuildGrid();
  // Places the key heatmaps, the null strips (attention only) and the colour scale in the top row.
  void arrangeTop(QCPLayoutGrid* top, QCPColorScale* scale, bool nullStrips, bool pairB);
  // A query × key heatmap of `rows` query tokens over nReg + rows keys on token axes (registers dashed off).
  HeatmapPlottable* addQueryKeyMap(QCPAxisRect* rect, const QString& name, std::shared_ptr<HeatmapData> data,
                                   const HeatmapStyle& style, QCPColorScale* scale, int rows, int nReg,
                                   const QString& xLabel);
  void rebuildHidden(QCPColorScale* scale);  // views/attention_hidden.cpp
  QString hiddenCsv() const;
  QString describeHiddenCell(int row, int col) const;
  void setHiddenCost(const QString& text, const QString& tip);  // the controls' cost label; empty: hidden
  std::shared_ptr<DiffCache> diff_;
  std::shared_ptr<Controls> ui_;
  AttentionHeadGrid* grid_ = nullptr;
  ColorScale scale_ = ColorScale::Log;
  double gamma_ = 0.5;
  bool allHeads_ = false;
  int hiddenHead_ = -1;
  bool preferHidden_ = false;                            // a parallel layer: show its SSM part
  int askedLayer_ = -2, askedToken_ = -2, askedHead_ = -2;  // the last request, not repeated
  uint64_t askedVersion_ = 0;
};

// rank1_distance against depth (log y) at the current token, and over tokens (Dong, Cordonnier & Loukas 2021).
class Rank1View : public InstrumentView {
  Q_OBJECT
 public:
  using InstrumentView::InstrumentView;
  QString viewId() const override { return QStringLiteral("rank1"); }
  QString title() const override { return tr("Distance to rank 1"); }
  QString reference() const override { return QStringLiteral("Dong, Cordonnier & Loukas 2021 (rank collapse)"); }
  QString csv() const override;

 protected:
  void rebuild() override;
  void handleClick(QCPAxisRect* rect, double x, double y) override;
};

// SSM Δ of a Mamba layer: tokens × channels heatmap, mean Δ per layer, retained state and the
// write / skip marks per token (Gu & Dao 2023).
class SsmDeltaView : public InstrumentView {
  Q_OBJECT
 public:
  using InstrumentView::InstrumentView;
  QString viewId() const override { return QStringLiteral("ssm_delta"); }
  QString title() const override { return tr("SSM Δ gates"); }
  QString reference() const override { return QStringLiteral("Gu & Dao 2023 (Mamba)"); }
  bool hasData() const override;
  QString csv() const override;
  int shownLayer() const;
  // Token t writes when its mean Δ ≥ kWrite × the median over the run, skips when ≤ kSkip ×.
  static constexpr double kWrite = 2.0, kSkip = 0.5;

 protected:
  void rebuild() override;
  QString describeCell(HeatmapPlottable* h, int row, int col) const override;
  void handleClick(QCPAxisRect* rect, double x, double y) override;

 private:
  struct RangeCache;
  std::shared_ptr<RangeCache> range_;
};

// Router of a MoE layer over the window 0..step: load f_i and importance P_i per expert, balance
// loss, z-loss and max load over tokens, the current token's probabilities with its top-k (Fedus, Zoph & Shazeer 2022; Zoph et al. 2022).
class RouterView : public InstrumentView {
  Q_OBJECT
 public:
  using InstrumentView::InstrumentView;
  QString viewId() const override { return QStringLiteral("router"); }
  QString title() const override { return tr("Router load"); }
  QString reference() const override { return QStringLiteral("Fedus, Zoph & Shazeer 2022 (Switch), Zoph et al. 2022 (ST-MoE)"); }
  bool hasData() const override;
  QString csv() const override;
  int shownLayer() const;

 protected:
  void rebuild() override;
  void handleClick(QCPAxisRect* rect, double x, double y) override;

 private:
  mutable RunStatsCache stats_;  // windows and curves, extended as tokens arrive
};

// KV cache and Mamba state bytes against context, log-log: measured points on the analytic lines of
// this model, its all-attention counterfactual, pure Mamba and the device memory (Lieber et al. 2024).
class MemoryView : public InstrumentView {
  Q_OBJECT
 public:
  using InstrumentView::InstrumentView;
  QString viewId() const override { return QStringLiteral("memory"); }
  QString title() const override { return tr("KV memory vs context"); }
  QString reference() const override { return QStringLiteral("Lieber et al. 2024 (Jamba)"); }
  QString csv() const override;

 protected:
  void rebuild() override;
};

// ΔM against ΔD per adapted matrix with the least-squares slope, and per-layer bars (Liu et al. 2024).
class DoraView : public InstrumentView {
  Q_OBJECT
 public:
  using InstrumentView::InstrumentView;
  QString viewId() const override { return QStringLiteral("dora"); }
  QString title() const override { return tr("DoRA magnitude / direction"); }
  QString reference() const override { return QStringLiteral("Liu et al. 2024 (DoRA)"); }
  bool hasData() const override;
  bool followsStep() const override { return false; }
  QString csv() const override;

 protected:
  void rebuild() override;
  QString describePoint(QCPAbstractPlottable* p, int index) const override;
  void handleClick(QCPAxisRect* rect, double x, double y) override;
};

// Outliers and sinks: the largest residual activation per layer and the token holding it, over
// tokens; the largest attention logit per head; non-finite markers (Miller 2023; Xiao et al. 2023, Sun et al. 2024).
class OutliersView : public InstrumentView {
  Q_OBJECT
 public:
  using InstrumentView::InstrumentView;
  QString viewId() const override { return QStringLiteral("outliers"); }
  QString title() const override { return tr("Outliers and sinks"); }
  QString reference() const override { return QStringLiteral("Sun et al. 2024 (massive activations), Xiao et al. 2023 (sinks)"); }
  QString csv() const override;

 protected:
  void rebuild() override;
  QString describePoint(QCPAbstractPlottable* p, int index) const override;
  void handleClick(QCPAxisRect* rect, double x, double y) override;

 private:
  mutable RunStatsCache stats_;  // maxima per depth, extended as tokens arrive
};

// Time to first token and time per token (p50, p99) against the floor bytes-per-token / bandwidth
// (TTFT / inter-token latency as serving stacks report them).
class LatencyView : public InstrumentView {
  Q_OBJECT
 public:
  using InstrumentView::InstrumentView;
  QString viewId() const override { return QStringLiteral("latency"); }
  QString title() const override { return tr("Latency"); }
  QString reference() const override { return QStringLiteral("Williams, Waterman & Patterson 2009 (roofline)"); }
  bool hasData() const override;
  QString csv() const override;

 protected:
  void rebuild() override;

 private:
  mutable RunStatsCache stats_;  // sorted step times, extended as tokens arrive
};

// Next-token candidates: the top 10 of softmax(logits) at the current step, with token text.
class CandidatesView : public InstrumentView {
  Q_OBJECT
 public:
  using InstrumentView::InstrumentView;
  QString viewId() const override { return QStringLiteral("candidates"); }
  QString title() const override { return tr("Next-token candidates"); }
  QString reference() const override { return QStringLiteral("softmax of the logits"); }
  bool hasData() const override;
  QString csv() const override;
  static constexpr int kTop = 10;
  // Token ids shown, top first (run A's top-k, then B's extra ones).
  const std::vector<int>& shownIds() const { return ids_; }

 protected:
  void rebuild() override;
  QString describePoint(QCPAbstractPlottable* p, int index) const override;

 private:
  std::vector<int> ids_;
};

}  // namespace hl::views
