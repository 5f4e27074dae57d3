// The attention pattern view's controls and head grid (see instrument_views.h): a bar over the plot
// with the head selector, the colour scale (linear / log / power γ), the all-heads toggle and reset
// zoom; the all-heads grid renders every head of the shown layer (run A) with the chosen scale.
// Reference: issue 17 item 6 and finding 12. The figure itself is drawn in attention_view.cpp.
#include <QApplication>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QMouseEvent>
#include <QPainter>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QToolButton>
#include <QVBoxLayout>
#include <algorithm>

#include "views/attention_head_grid.h"
#include "views/attention_rows.h"
#include "views/instrument_views.h"

namespace hl::views {

struct AttentionPatternView::Controls {
  QWidget* bar = nullptr;
  QComboBox* layer = nullptr;  // every attention layer and every SSM layer (its hidden attention)
  std::string layersOf;        // the schedule the layer items were made for
  QSpinBox* head = nullptr;
  QLabel* cost = nullptr;  // the hidden attention's cost: the current row's time, the rows drawn
  QComboBox* scale = nullptr;
  QDoubleSpinBox* gamma = nullptr;
  QToolButton* allHeads = nullptr;
  QToolButton* resetZoom = nullptr;
};

AttentionPatternView::AttentionPatternView(QWidget* parent) : InstrumentView(parent) {
  buildControls();
}

void AttentionPatternView::buildControls() {
  ui_ = std::make_shared<Controls>();
  Controls& c = *ui_;
  c.bar = new QWidget(this);
  c.bar->setObjectName("attentionControls");
  auto* row = new QHBoxLayout(c.bar);
  row->setContentsMargins(4, 2, 4, 0);
  row->setSpacing(4);
  c.layer = new QComboBox(c.bar);
  c.layer->setObjectName("attentionLayer");
  c.layer->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  c.layer->setToolTip(
      tr("Layer drawn: an attention layer's heads, or an SSM layer's hidden attention (Ali, Zimerman & Wolf "
         "2024): M[t, s] = (C_t · B_s) · exp(A · Σ Δ over r = s+1..t) · Δ_s, computed on demand for the current "
         "token (also: click a layer in another view)"));
  auto* headLabel = new QLabel(tr("head"), c.bar);
  c.head = new QSpinBox(c.bar);
  c.head->setObjectName("attentionHead");
  c.head->setRange(0, 0);
  c.head->setToolTip(tr("Attention head drawn (also: click a column of the entropy heatmap, or a head of the "
                        "all-heads grid)"));
  c.scale = new QComboBox(c.bar);
  c.scale->setObjectName("attentionColorScale");
  c.scale->addItem(tr("log colour"), static_cast<int>(ColorScale::Log));
  c.scale->addItem(tr("power γ"), static_cast<int>(ColorScale::Power));
  c.scale->addItem(tr("linear colour"), static_cast<int>(ColorScale::Linear));
  c.scale->setToolTip(
      tr("Colour scale of the weights. Log: four decades below 1, so the 1/T weights of a long context "
         "stay visible. Power: weight^γ (γ < 1 brightens small weights). Linear: weight itself (small "
         "weights look black beyond ~50 tokens). The colour bar names the scale in use."));
  c.gamma = new QDoubleSpinBox(c.bar);
  c.gamma->setObjectName("attentionGamma");
  c.gamma->setRange(0.05, 1.0);
  c.gamma->setSingleStep(0.05);
  c.gamma->setDecimals(2);
  c.gamma->setToolTip(tr("γ of the power colour scale: the colour shows weight^γ"));
  c.allHeads = new QToolButton(c.bar);
  c.allHeads->setObjectName("attentionAllHeads");
  c.allHeads->setText(tr("all heads"));
  c.allHeads->setCheckable(true);
  c.allHeads->setToolTip(tr("Every head of this layer in a grid (run A); click a head to show it alone"));
  c.resetZoom = new QToolButton(c.bar);
  c.resetZoom->setObjectName("attentionResetZoom");
  c.resetZoom->setText(tr("reset zoom"));
  c.resetZoom->setToolTip(
      tr("Show the whole matrix again (as a double-click does). Zoom with the wheel and drag to pan; zoomed in, "
         "the axes name the tokens"));
  row->addWidget(c.layer);
  row->addWidget(headLabel);
  row->addWidget(c.head);
  row->addWidget(c.scale);
  row->addWidget(c.gamma);
  row->addWidget(c.allHeads);
  row->addWidget(c.resetZoom);
  c.cost = new QLabel(c.bar);
  c.cost->setObjectName("attentionHiddenCost");
  c.cost->hide();
  row->addWidget(c.cost);
  row->addStretch(1);
  grid_ = new AttentionHeadGrid(this);
  grid_->setObjectName("attentionHeadGrid");
  grid_->hide();
  auto* layout = qobject_cast<QVBoxLayout*>(this->layout());
  layout->insertWidget(0, c.bar);
  layout->addWidget(grid_, 1);
  layout->setStretchFactor(plot(), 1);

  connect(c.layer, &QComboBox::activated, this, [this](int i) {
    const int code = ui_->layer->itemData(i).toInt();
    chooseLayer(code / 2, code % 2 == 1);
  });
  connect(c.head, &QSpinBox::valueChanged, this, [this](int h) {
    if (showsHidden())
      setHiddenHead(h);
    else if (h != shownHead())
      emit headClicked(h);
  });
  connect(c.scale, &QComboBox::currentIndexChanged, this, [this](int i) {
    setColorScale(static_cast<ColorScale>(ui_->scale->itemData(i).toInt()), gamma_);
  });
  connect(c.gamma, &QDoubleSpinBox::valueChanged, this, [this](double g) { setColorScale(scale_, g); });
  connect(c.allHeads, &QToolButton::toggled, this, &AttentionPatternView::setAllHeads);
  connect(c.resetZoom, &QToolButton::clicked, this, [this] {
    // The base view restores every home range on a double-click of the plot.
    const QPointF at(plot()->width() / 2.0, plot()->height() / 2.0);
    QMouseEvent dbl(QEvent::MouseButtonDblClick, at, plot()->mapToGlobal(at), Qt::LeftButton, Qt::LeftButton,
                    Qt::NoModifier);
    QApplication::sendEvent(plot(), &dbl);
  });
  connect(grid_, &AttentionHeadGrid::headClicked, this, [this](int h) {
    setAllHeads(false);
    emit headClicked(h);
  });
  syncControls();
}

void AttentionPatternView::syncControls() {
  if (!ui_) return;
  Controls& c = *ui_;
  const QSignalBlocker b1(c.head), b2(c.scale), b3(c.gamma), b4(c.allHeads), b5(c.layer);
  const ModelShape s = state().rec ? modelShape(state().rec->config) : ModelShape{};
  const std::string layersOf = s.schedule.describe() + (state().hiddenOnDemand ? "+ssm" : "");
  if (c.layersOf != layersOf || c.layer->count() == 0) {
    c.layersOf = layersOf;
    c.layer->clear();
    for (int l = 0; l < s.L; ++l) {
      if (s.schedule[l].has_attention()) c.layer->addItem(tr("L%1 attention").arg(l), 2 * l);
      if (s.schedule[l].has_ssm() && state().hiddenOnDemand) c.layer->addItem(tr("L%1 SSM (hidden attention)").arg(l), 2 * l + 1);
    }
  }
  const bool hidden = showsHidden();
  c.layer->setCurrentIndex(c.layer->findData(hidden ? 2 * state().layer + 1 : 2 * shownLayer()));
  c.layer->setEnabled(c.layer->count() > 1);
  if (hidden) {
    const bool mamba1 = s.schedule[state().layer].mixer == hl::MixerKind::Mamba1;
    const int heads = static_cast<int>(mamba1 ? state().rec->config.mamba_inner() : state().rec->config.mamba_n_heads);
    c.head->setRange(-1, std::max(0, heads - 1));
    c.head->setSpecialValueText(mamba1 ? tr("mean |M| of channels") : tr("mean |M| of heads"));
    c.head->setValue(hiddenHead_);
    c.head->setEnabled(true);
  } else {
    const int nh = state().rec ? s.nh : 0;
    c.head->setSpecialValueText(QString());
    c.head->setRange(0, std::max(0, nh - 1));
    c.head->setValue(shownHead());
    c.head->setEnabled(nh > 1);
  }
  c.allHeads->setEnabled(!hidden);
  if (!hidden) c.cost->hide();
  c.scale->setCurrentIndex(c.scale->findData(static_cast<int>(scale_)));
  c.gamma->setValue(gamma_);
  c.gamma->setEnabled(scale_ == ColorScale::Power);
  c.allHeads->setChecked(allHeads_);
}

void AttentionPatternView::setHiddenCost(const QString& text, const QString& tip) {
  ui_->cost->setText(text);
  ui_->cost->setToolTip(tip);
  ui_->cost->setVisible(!text.isEmpty());
}

HeatmapStyle AttentionPatternView::weightStyle() const {
  HeatmapStyle st{0.0f, 1.0f, Colormap::Magma, Pooling::Max};
  st.scale = scale_;
  st.gamma = static_cast<float>(gamma_);
  st.decades = 4.0f;
  return st;
}

void AttentionPatternView::setColorScale(ColorScale scale, double gamma) {
  scale_ = scale;
  gamma_ = std::clamp(gamma, 0.05, 1.0);
  setState(state());
}

void AttentionPatternView::setAllHeads(bool on) {
  allHeads_ = on;
  grid_->setVisible(on);
  plot()->setVisible(!on);
  setState(state());
}

void AttentionPatternView::rebuildGrid() {
  if (allHeads_ && showsHidden()) {  // the grid holds attention heads only
    allHeads_ = false;
    grid_->hide();
    plot()->show();
    const QSignalBlocker block(ui_->allHeads);
    ui_->allHeads->setChecked(false);
  }
  if (!allHeads_ || !hasData()) {
    grid_->setHeads({}, -1, hasData() ? QString() : figureTitle());
    return;
  }
  const ModelShape s = modelShape(state().rec->config);
  const hl::Run* a = state().a;
  const int layer = shownLayer(), ord = s.attnOrdinal(layer), sa = stepA(), nReg = runRegisters(*a, s);
  const int rows = static_cast<int>(a->records.size());  // every query, as the one-head figure
  std::unique_ptr<HeatmapRenderer> renderer = makeHeatmapRenderer();
  const QSize px = grid_->thumbnailSize();
  QVector<QImage> images;
  for (int h = 0; h < s.nh; ++h) {
    HeatmapData d(nReg + rows, 0);
    for (int r = 0; r < rows; ++r) d.addRow(attn::rowPtr(a->records[r], ord, h, s.nh, nReg, r), nReg + r + 1);
    QImage img = renderer->render(d, QRectF(0, 0, nReg + rows, rows), weightStyle(), px);
    // The current query row, marked as in the one-head figure (image row 0 is query 0).
    QPainter p(&img);
    p.setPen(QPen(th().highlight, 1));
    const double y = (sa + 0.5) * img.height() / rows;
    p.drawLine(QPointF(0, y), QPointF(img.width(), y));
    p.end();
    images << img;
  }
  grid_->setHeads(
      images, shownHead(),
      tr("%1, all %2 heads, run A, tokens 0..%3, line at token %4 — colour: weight%5; click a head to focus it")
          .arg(layerName(s, layer))
          .arg(s.nh)
          .arg(rows - 1)
          .arg(sa)
          .arg(colorScaleName(weightStyle())));
}

}  // namespace hl::views
