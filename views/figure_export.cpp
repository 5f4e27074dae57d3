// Export All without a window (see figure_export.h): one view of each kind, offscreen-sized, each
// writing its figure(s) and CSV atomically; the first failure ends it. Reference: issue 5 item 5,
// issue 18 item 8.
#include "views/figure_export.h"

#include <QDir>
#include <QFile>
#include <memory>

#include "engine/io/atomic_file.h"
#include "views/instrument_view.h"
#include "views/view_registry.h"

namespace hl::views {

FigureExportResult exportFigures(const ViewState& state, const FigureExportOptions& opts) {
  FigureExportResult res;
  QDir dir(opts.dir);
  if (!dir.exists() && !QDir().mkpath(opts.dir)) {
    res.errors << QStringLiteral("%1: cannot create the folder").arg(opts.dir);
    return res;
  }
  for (const QString& id : viewIds()) {
    if (!opts.only.isEmpty() && !opts.only.contains(id)) continue;
    std::unique_ptr<InstrumentView> v(createView(id));
    v->resize(opts.width, opts.height);
    v->applyTheme(opts.dark);
    v->setState(state);
    if (!v->hasData()) {
      res.skipped << QStringLiteral("%1: %2").arg(id, v->figureTitle());
      continue;
    }
    for (const QString& fmt : opts.formats) {
      const QString path = dir.filePath(id + "." + fmt.toLower());
      QString err;
      if (!v->exportFigure(path, fmt, opts.width, opts.height, opts.dpi, &err)) {
        res.errors << err;
        return res;  // the first failure ends the export (a full disk fails every later file too)
      }
      res.written << path;
    }
    if (opts.csv) {
      const QString path = dir.filePath(id + ".csv");
      const QByteArray bytes = v->csv().toUtf8();
      try {
        const std::string file = QFile::encodeName(path).toStdString();
        hl::write_file_atomic(file, bytes.constData(), static_cast<size_t>(bytes.size()));
      } catch (const std::exception& e) {
        res.errors << QString::fromLocal8Bit(e.what());
        return res;
      }
      res.written << path;
    }
  }
  return res;
}

}  // namespace hl::views
