// Export All for a ViewState without a window (issue 5 item 5, trace-format.md §4 `hybridlens
// export`): creates every view, gives it the state, and writes <dir>/<viewId>.<format> and
// <dir>/<viewId>.csv for each view that has data; views without data are skipped with the reason.
#pragma once
#include <QString>
#include <QStringList>

#include "views/view_state.h"

namespace hl::views {

struct FigureExportOptions {
  QString dir;                 // created if missing
  QStringList formats{"png"};  // any of png, svg, pdf
  int width = 1200, height = 800;
  double dpi = 150;
  bool csv = true;
  bool dark = false;
  QStringList only;  // view ids to export; empty: all
};

struct FigureExportResult {
  QStringList written;  // paths written
  QStringList skipped;  // "viewId: reason" for views without data
  QStringList errors;   // the first failure, one line (the export stops there)
};

// Needs a QApplication (any platform, "offscreen" included).
FigureExportResult exportFigures(const ViewState& state, const FigureExportOptions& opts);

}  // namespace hl::views
