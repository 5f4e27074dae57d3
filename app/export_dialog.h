// Figure export from the app (issue 5 item 5): the options dialog (folder, size in pixels, DPI,
// formats) and Export All, which writes every view's figure as PNG/SVG/PDF and its data as CSV
// through the views' own export API (views/instrument_view.h). One view at a time uses the same.
#pragma once
#include <QDialog>
#include <QString>
#include <QStringList>
#include <vector>

class QCheckBox;
class QDoubleSpinBox;
class QLineEdit;
class QSpinBox;

namespace hl::views {
class InstrumentView;
}

namespace hl::app {

struct ExportOptions {
  QString folder;
  int width = 1200, height = 800;  // pixels of the PNG; the layout of SVG/PDF at the same DPI
  double dpi = 150;
  bool png = true, svg = true, pdf = true, csv = true;
  void load();        // from QSettings
  void save() const;  // to QSettings
};

struct ExportResult {
  QStringList written;  // absolute paths
  QStringList errors;   // the first failed file, one line (the export stops there)
};

// Writes <folder>/<viewId>.<ext> for every view and format chosen. Creates the folder.
ExportResult exportViews(const std::vector<hl::views::InstrumentView*>& views, const ExportOptions& o);

class ExportDialog : public QDialog {
  Q_OBJECT

 public:
  // `what` names what is exported ("all 11 views", "Router load").
  ExportDialog(const ExportOptions& initial, const QString& what, QWidget* parent = nullptr);
  ExportOptions options() const;

 private:
  QLineEdit* folder_ = nullptr;
  QSpinBox *width_ = nullptr, *height_ = nullptr;
  QDoubleSpinBox* dpi_ = nullptr;
  QCheckBox *png_ = nullptr, *svg_ = nullptr, *pdf_ = nullptr, *csv_ = nullptr;
};

}  // namespace hl::app
