// StatsWindow (see stats_window.h): controls, header and the views' tabs over a StatsDocument.
#include "app/stats_window.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QTabWidget>
#include <QVBoxLayout>

#include "app/help_dialog.h"
#include "sessions/sweep_summary.h"

namespace hl::app {

StatsWindow::StatsWindow(QWidget* parent) : QWidget(parent, Qt::Window) {
  setObjectName("statsWindow");
  setWindowTitle(tr("Sweep statistics — HybridLens"));
  resize(1200, 800);
  doc_ = new StatsDocument(this);
  auto* layout = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  auto button = [&](const QString& text, const char* name, const QString& tip) {
    auto* b = new QPushButton(text, this);
    b->setObjectName(name);
    b->setToolTip(tip);
    bar->addWidget(b);
    return b;
  };
  QPushButton* open = button(tr("Open…"), "statsOpen", tr("Open a stats file (.hlstats) written by hybridlens sweep"));
  compare_ = button(tr("Compare with…"), "statsCompare",
                    tr("A second stats file over the same schedule (e.g. softmax vs softmax-1 over the same prompts), "
                       "drawn beside A in the run B colour"));
  endCompare_ = button(tr("End compare"), "statsEndCompare", tr("Show sweep A alone"));
  export_ = button(tr("Export figure…"), "statsExport", tr("The figure of the tab shown, as PNG/SVG/PDF and CSV"));
  QPushButton* help =
      button(tr("Help"), "statsHelp",
             tr("What each view shows and which quantiles the boxes and whiskers are (Help > Instruments)"));
  connect(help, &QPushButton::clicked, this, [this] { showInstrumentsHelp(this); });
  connect(open, &QPushButton::clicked, this, [this] { emit openRequested(false); });
  connect(compare_, &QPushButton::clicked, this, [this] { emit openRequested(true); });
  connect(endCompare_, &QPushButton::clicked, doc_, &StatsDocument::clearB);
  connect(export_, &QPushButton::clicked, this, [this] {
    if (hl::views::StatsView* v = currentView()) emit exportRequested(v);
  });
  bar->addSpacing(16);
  bar->addWidget(new QLabel(tr("Instrument:"), this));
  instrument_ = new QComboBox(this);
  instrument_->setObjectName("statsInstrument");
  // Every instrument the sweep aggregates, whatever it is: a new one appears here without edits.
  for (const hl::InstrumentInfo& i : hl::sweep_instruments()) {
    instrument_->addItem(QString::fromLatin1(i.name) + QLatin1Char(' ') + QString::fromLatin1(i.axes));
    instrument_->setItemData(instrument_->count() - 1, QString::fromLatin1(i.meaning), Qt::ToolTipRole);
  }
  bar->addWidget(instrument_);
  bar->addWidget(new QLabel(tr("Layer:"), this));
  row_ = new QComboBox(this);
  row_->setObjectName("statsRow");
  row_->setToolTip(tr("Boxes and histograms of one layer's heads, or of every layer"));
  bar->addWidget(row_);
  bar->addStretch(1);
  layout->addLayout(bar);
  meaning_ = new QLabel(this);
  meaning_->setObjectName("statsMeaning");
  meaning_->setWordWrap(true);
  layout->addWidget(meaning_);
  header_ = new QLabel(this);
  header_->setObjectName("statsHeader");
  header_->setWordWrap(true);
  header_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(header_);
  tabs_ = new QTabWidget(this);
  tabs_->setObjectName("statsTabs");
  for (hl::views::StatsView* v : std::initializer_list<hl::views::StatsView*>{new hl::views::StatsBoxView(this),
                                                                              new hl::views::StatsHistView(this),
                                                                              new hl::views::StatsRouterView(this)}) {
    views_.push_back(v);
    tabs_->addTab(v, v->title());
    tabs_->setTabToolTip(tabs_->count() - 1, tr("%1 — after %2").arg(v->title(), v->reference()));
    doc_->addViewer(v);
  }
  layout->addWidget(tabs_, 1);
  connect(instrument_, &QComboBox::currentIndexChanged, this, [this](int i) {
    doc_->setRow(-1);
    doc_->setInstrument(i);
  });
  connect(row_, &QComboBox::activated, this, [this](int i) { doc_->setRow(row_->itemData(i).toInt()); });
  connect(doc_, &StatsDocument::changed, this, &StatsWindow::onChanged);
  onChanged();
}

hl::views::StatsView* StatsWindow::currentView() const {
  return qobject_cast<hl::views::StatsView*>(tabs_->currentWidget());
}

void StatsWindow::applyTheme(bool dark) {
  for (hl::views::StatsView* v : views_) v->applyTheme(dark);
}

void StatsWindow::fillRows() {
  const hl::views::StatsState& s = doc_->state();
  row_->blockSignals(true);
  row_->clear();
  const size_t i = static_cast<size_t>(std::max(0, s.instrument));
  if (s.a && i < s.a->stats.dists.size() && i < hl::sweep_instruments().size()) {
    const std::vector<std::string> names = hl::axis_names(hl::sweep_instruments()[i].axes);
    const hl::Distribution& d = s.a->stats.dists[i];
    const hl::SweepAxes ax = hl::sweep_axes(s.a->manifest);
    if (!names.empty()) {
      row_->addItem(tr("every %1").arg(QString::fromStdString(hl::axis_title(names[0]))), -1);
      const int64_t n = names.size() >= 2 ? hl::cell_grid(d).rows : d.cells();
      for (int64_t r = 0; r < n; ++r)
        row_->addItem(QString::fromStdString(hl::axis_label(ax, names[0], r)), static_cast<int>(r));
    }
  }
  row_->setEnabled(row_->count() > 1);
  row_->setCurrentIndex(std::max(0, row_->findData(s.row)));
  row_->blockSignals(false);
}

QString StatsWindow::headerText() const {
  const hl::views::StatsState& s = doc_->state();
  if (!s.a) return tr("No sweep open: File > Open sweep statistics… (or drop a .hlstats file on the main window).");
  auto lines = [](const QString& tag, const QString& path, const hl::SweepFile& f) {
    QStringList parts;
    for (const auto& [k, v] : hl::sweep_header(f))
      parts << QStringLiteral("%1: %2").arg(QString::fromStdString(k), QString::fromStdString(v).toHtmlEscaped());
    return QStringLiteral("<b>%1</b> %2 — %3").arg(tag, path.toHtmlEscaped(), parts.join(QStringLiteral("; ")));
  };
  QString t = lines(QStringLiteral("A"), doc_->pathA(), *s.a);
  if (s.b) {
    t += QStringLiteral("<br>") + lines(QStringLiteral("B"), doc_->pathB(), *s.b);
    t += QStringLiteral("<br><b>%1</b> %2")
             .arg(tr("A and B differ in:"), doc_->differences().isEmpty()
                                                ? tr("nothing recorded (same options and prompts)")
                                                : doc_->differences().join(QStringLiteral("; ")).toHtmlEscaped());
  }
  return t;
}

void StatsWindow::onChanged() {
  const hl::views::StatsState& s = doc_->state();
  if (instrument_->currentIndex() != s.instrument) {
    instrument_->blockSignals(true);
    instrument_->setCurrentIndex(s.instrument);
    instrument_->blockSignals(false);
  }
  const size_t i = static_cast<size_t>(std::max(0, s.instrument));
  if (i < hl::sweep_instruments().size())
    meaning_->setText(QStringLiteral("<i>%1</i>: %2")
                          .arg(QString::fromLatin1(hl::sweep_instruments()[i].name),
                               QString::fromLatin1(hl::sweep_instruments()[i].meaning).toHtmlEscaped()));
  fillRows();
  header_->setText(headerText());
  compare_->setEnabled(s.a != nullptr);
  endCompare_->setEnabled(s.b != nullptr);
  export_->setEnabled(s.a != nullptr);
  setWindowTitle(
      s.a ? tr("Sweep statistics: %1%2 — HybridLens").arg(s.nameA, s.b ? tr(" vs %1").arg(s.nameB) : QString())
          : tr("Sweep statistics — HybridLens"));
}

}  // namespace hl::app
