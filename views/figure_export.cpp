// Export All without a window (see figure_export.h): one view of each kind, offscreen-sized, each
// writing its figure(s) and CSV. Reference: issue 5 item 5.
#include "views/figure_export.h"

#include <QDir>
#include <QFile>
#include <memory>

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
      if (v->exportFigure(path, fmt, opts.width, opts.height, opts.dpi, &err))
        res.written << path;
      else
        res.errors << err;
    }
    if (opts.csv) {
      const QString path = dir.filePath(id + ".csv");
      QFile f(path);
      const QByteArray bytes = v->csv().toUtf8();
      if (f.open(QIODevice::WriteOnly | QIODevice::Truncate) && f.write(bytes) == bytes.size() && f.flush())
        res.written << path;
      else
        res.errors << QStringLiteral("%1: cannot write the CSV file").arg(path);
    }
  }
  return res;
}

}  // namespace hl::views
