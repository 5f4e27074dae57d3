// Export dialog and Export All (see export_dialog.h). Figures come from
// InstrumentView::exportFigure (raster PNG at the exact size and DPI, vector SVG/PDF); CSV from
// InstrumentView::csv(), written atomically with hl::write_file_atomic; the first failure ends Export All.
#include "app/export_dialog.h"

#include <QCheckBox>
#include <QDialogButtonBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFile>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>
#include <QStandardPaths>

#include "engine/io/atomic_file.h"
#include "views/instrument_view.h"

namespace hl::app {

void ExportOptions::load() {
  QSettings s;
  s.beginGroup(QStringLiteral("export"));
  folder =
      s.value("folder", QStandardPaths::writableLocation(QStandardPaths::PicturesLocation) + "/hybridlens").toString();
  width = s.value("width", width).toInt();
  height = s.value("height", height).toInt();
  dpi = s.value("dpi", dpi).toDouble();
  png = s.value("png", png).toBool();
  svg = s.value("svg", svg).toBool();
  pdf = s.value("pdf", pdf).toBool();
  csv = s.value("csv", csv).toBool();
  s.endGroup();
}

void ExportOptions::save() const {
  QSettings s;
  s.beginGroup(QStringLiteral("export"));
  s.setValue("folder", folder);
  s.setValue("width", width);
  s.setValue("height", height);
  s.setValue("dpi", dpi);
  s.setValue("png", png);
  s.setValue("svg", svg);
  s.setValue("pdf", pdf);
  s.setValue("csv", csv);
  s.endGroup();
}

ExportResult exportViews(const std::vector<hl::views::InstrumentView*>& views, const ExportOptions& o) {
  ExportResult r;
  QDir dir(o.folder);
  if (!QDir().mkpath(o.folder)) {
    r.errors << QObject::tr("%1: cannot create the folder").arg(o.folder);
    return r;
  }
  QStringList formats;
  if (o.png) formats << QStringLiteral("png");
  if (o.svg) formats << QStringLiteral("svg");
  if (o.pdf) formats << QStringLiteral("pdf");
  for (hl::views::InstrumentView* v : views) {
    for (const QString& f : formats) {
      const QString path = dir.absoluteFilePath(v->viewId() + "." + f);
      QString err;
      if (!v->exportFigure(path, f, o.width, o.height, o.dpi, &err)) {
        r.errors << (err.isEmpty() ? QStringLiteral("%1: %2").arg(path, QObject::tr("export failed")) : err);
        return r;  // the first failure ends the export (issue 18 item 8)
      }
      r.written << path;
    }
    if (o.csv) {
      const QString path = dir.absoluteFilePath(v->viewId() + ".csv");
      const QByteArray bytes = v->csv().toUtf8();
      try {
        const std::string file = QFile::encodeName(path).toStdString();
        hl::write_file_atomic(file, bytes.constData(), static_cast<size_t>(bytes.size()));
      } catch (const std::exception& e) {
        r.errors << QString::fromLocal8Bit(e.what());
        return r;
      }
      r.written << path;
    }
  }
  return r;
}

ExportDialog::ExportDialog(const ExportOptions& initial, const QString& what, QWidget* parent) : QDialog(parent) {
  setWindowTitle(tr("Export %1").arg(what));
  auto* form = new QFormLayout(this);
  folder_ = new QLineEdit(initial.folder, this);
  auto* browse = new QPushButton(tr("Browse…"), this);
  auto* row = new QHBoxLayout;
  row->addWidget(folder_, 1);
  row->addWidget(browse);
  form->addRow(tr("Folder"), row);
  width_ = new QSpinBox(this);
  height_ = new QSpinBox(this);
  for (QSpinBox* s : {width_, height_}) {
    s->setRange(64, 20000);
    s->setSuffix(tr(" px"));
  }
  width_->setValue(initial.width);
  height_->setValue(initial.height);
  auto* size = new QHBoxLayout;
  size->addWidget(width_);
  size->addWidget(new QLabel(QStringLiteral("×"), this));
  size->addWidget(height_);
  form->addRow(tr("Size"), size);
  dpi_ = new QDoubleSpinBox(this);
  dpi_->setRange(36, 1200);
  dpi_->setDecimals(0);
  dpi_->setValue(initial.dpi);
  dpi_->setToolTip(tr("Text and lines keep their physical size at this DPI; the PNG is exactly the size above"));
  form->addRow(tr("DPI"), dpi_);
  png_ = new QCheckBox(QStringLiteral("PNG"), this);
  svg_ = new QCheckBox(QStringLiteral("SVG"), this);
  pdf_ = new QCheckBox(QStringLiteral("PDF"), this);
  csv_ = new QCheckBox(tr("CSV data"), this);
  png_->setChecked(initial.png);
  svg_->setChecked(initial.svg);
  pdf_->setChecked(initial.pdf);
  csv_->setChecked(initial.csv);
  auto* fmts = new QHBoxLayout;
  for (QCheckBox* c : {png_, svg_, pdf_, csv_}) fmts->addWidget(c);
  form->addRow(tr("Formats"), fmts);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
  buttons->button(QDialogButtonBox::Ok)->setText(tr("Export"));
  form->addRow(buttons);
  connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString d = QFileDialog::getExistingDirectory(this, tr("Export to folder"), folder_->text());
    if (!d.isEmpty()) folder_->setText(d);
  });
}

ExportOptions ExportDialog::options() const {
  ExportOptions o;
  o.folder = folder_->text();
  o.width = width_->value();
  o.height = height_->value();
  o.dpi = dpi_->value();
  o.png = png_->isChecked();
  o.svg = svg_->isChecked();
  o.pdf = pdf_->isChecked();
  o.csv = csv_->isChecked();
  return o;
}

}  // namespace hl::app
