// InstrumentView::exportFigure: PNG/SVG/PDF through QCustomPlot's painter path (QImage,
// QSvgGenerator, QPdfWriter at a 96-dpi logical layout), every panel shown, rendered in memory and
// written atomically.
#include <QBuffer>
#include <QFile>
#include <QPdfWriter>
#include <QSvgGenerator>
#include <QTabBar>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "engine/io/atomic_file.h"
#include "views/instrument_view.h"
#include "views/plot_fit.h"

namespace hl::views {

bool InstrumentView::exportFigure(const QString& path, const QString& format, int widthPx, int heightPx, double dpi,
                                  QString* error) const {
  auto fail = [error](const QString& m) {
    if (error) *error = m;
    return false;
  };
  const QString fmt = format.toLower();
  if (fmt != "png" && fmt != "svg" && fmt != "pdf")
    return fail(tr("format '%1': expected png, svg or pdf").arg(format));
  if (widthPx < 64 || heightPx < 64 || widthPx > 16384 || heightPx > 16384)
    return fail(tr("size %1 x %2 px: each side must be in [64, 16384]").arg(widthPx).arg(heightPx));
  if (!(dpi >= 36 && dpi <= 2400)) return fail(tr("dpi %1: expected a value in [36, 2400]").arg(dpi));
  // Logical layout at 96 dpi: text in points and pens in pixels keep their physical size.
  const double scale = dpi / 96.0;
  const int lw = std::max(32, static_cast<int>(std::lround(widthPx / scale)));
  const int lh = std::max(32, static_cast<int>(std::lround(heightPx / scale)));
  constexpr int kDpm96 = 3780;  // dots per metre at 96 dpi
  // The title fits the figure's width while it is drawn, then the window's again.
  const QString fullTitle = title_->property("hlFull").toString();
  fitTitle(title_, fullTitle, lw);
  struct RestoreTitle {
    QCPTextElement* t;
    QString full;
    int width;
    ~RestoreTitle() { fitTitle(t, full, width); }
  } restoreTitle{title_, fullTitle, plot_->width()};
  // A figure shows every panel, its legends wrapped to the figure's width; the window's fold after.
  const QSize room = panelRoom(plot_->size());
  fitPanelsTo(QSize(lw, lh), false);
  struct RestorePanels {
    const InstrumentView* v;
    QSize room;
    ~RestorePanels() { v->fitPanelsTo(room, true); }
  } restorePanels{this, room};

  QByteArray bytes;  // rendered in memory, then written with write_file_atomic
  QBuffer buf(&bytes);
  buf.open(QIODevice::WriteOnly);
  if (fmt == "png") {
    QImage img(widthPx, heightPx, QImage::Format_ARGB32_Premultiplied);
    img.setDotsPerMeterX(kDpm96);
    img.setDotsPerMeterY(kDpm96);
    img.fill(th().background);
    QCPPainter painter(&img);
    painter.setRenderHint(QPainter::Antialiasing, true);
    painter.scale(static_cast<double>(widthPx) / lw, static_cast<double>(heightPx) / lh);
    plot_->toPainter(&painter, lw, lh);
    painter.end();
    const int dpm = static_cast<int>(std::lround(dpi / 0.0254));
    img.setDotsPerMeterX(dpm);
    img.setDotsPerMeterY(dpm);
    if (!img.convertToFormat(QImage::Format_ARGB32).save(&buf, "PNG"))
      return fail(tr("%1: cannot encode the PNG file").arg(path));
  } else if (fmt == "svg") {
    QSvgGenerator gen;
    gen.setOutputDevice(&buf);
    gen.setSize(QSize(lw, lh));
    gen.setViewBox(QRect(0, 0, lw, lh));
    gen.setResolution(96);
    gen.setTitle(figureTitle());
    gen.setDescription(QStringLiteral("HybridLens %1 (%2)").arg(title(), reference()));
    QCPPainter painter;
    if (!painter.begin(&gen)) return fail(tr("%1: cannot write the SVG file").arg(path));
    painter.setMode(QCPPainter::pmVectorized);
    plot_->toPainter(&painter, lw, lh);
    painter.end();
  } else {
    QPdfWriter pdf(&buf);
    pdf.setResolution(96);
    pdf.setPageSize(QPageSize(QSizeF(widthPx / dpi * 72.0, heightPx / dpi * 72.0), QPageSize::Point));
    pdf.setPageMargins(QMarginsF(0, 0, 0, 0));
    pdf.setTitle(figureTitle());
    pdf.setCreator(QStringLiteral("HybridLens"));
    QCPPainter painter;
    if (!painter.begin(&pdf)) return fail(tr("%1: cannot write the PDF file").arg(path));
    painter.setMode(QCPPainter::pmVectorized);
    painter.setWindow(0, 0, lw, lh);
    plot_->toPainter(&painter, lw, lh);
    painter.end();
  }
  plot_->replot(QCustomPlot::rpQueuedReplot);  // the layout was changed for the export size
  buf.close();
  if (bytes.isEmpty()) return fail(tr("%1: the %2 file is empty").arg(path, fmt));
  try {  // all or nothing: a full disk leaves the previous file or none (issue 18 item 8)
    const std::string file = QFile::encodeName(path).toStdString();
    hl::write_file_atomic(file, bytes.constData(), static_cast<size_t>(bytes.size()));
  } catch (const std::exception& e) {
    return fail(QString::fromLocal8Bit(e.what()));
  }
  return true;
}

}  // namespace hl::views
