// TokenAxisTicker: the ticks of a token axis (cells c cover [c, c + 1)). Zoomed in far enough that
// every visible cell has room for a line of text, each cell gets a tick at its centre labelled with
// its token text; otherwise whole-number ticks (1, 2, 5, 10, ...) as on any token axis. Not a view;
// the labels come from a function the view gives (registers, then the recording's tokens).
#pragma once
#include <qcustomplot.h>
#include <QPointer>
#include <functional>

namespace hl::views {

class TokenAxisTicker : public QCPAxisTickerFixed {
 public:
  // `label(c)` names cell c; `axis` is the axis this ticker serves (its pixel length decides).
  TokenAxisTicker(QCPAxis* axis, std::function<QString(int)> label, int cells);
  // True when `range` (cells) on `pixels` pixels leaves at least kMinPixelsPerLabel per cell.
  static bool labelled(const QCPRange& range, int pixels);
  static constexpr int kMinPixelsPerLabel = 13;
  static constexpr int kMaxLabelChars = 10;  // longer token texts are elided with "…"
  // True when the last generate() drew token labels.
  bool lastLabelled() const { return lastLabelled_; }

  void generate(const QCPRange& range, const QLocale& locale, QChar formatChar, int precision, QVector<double>& ticks,
                QVector<double>* subTicks, QVector<QString>* tickLabels) override;

 private:
  QPointer<QCPAxis> axis_;
  std::function<QString(int)> label_;
  int cells_;
  bool lastLabelled_ = false;
};

// Gives `axis` a TokenAxisTicker and keeps its tick labels readable: rotated upright (−90°) on a
// horizontal axis while token labels show, level otherwise.
void setTokenAxisTicker(QCPAxis* axis, std::function<QString(int)> label, int cells);

}  // namespace hl::views
