// TokenStrip (see token_strip.h): a canvas in a scroll area. Chip widths are measured once per
// token; the wrapped layout is recomputed on resize and when tokens change; painting walks only
// the lines inside the exposed rectangle.
#include "app/token_strip.h"

#include <QHelpEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QScrollBar>
#include <QToolTip>
#include <algorithm>
#include <map>

namespace hl::app {

class TokenCanvas : public QWidget {
 public:
  explicit TokenCanvas(TokenStrip* strip) : QWidget(strip), strip_(strip) {
    setMouseTracking(true);
    setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
  }

  std::vector<TokenStrip::Chip> chips;
  std::vector<int> widths;   // per chip, in pixels
  std::map<int, QString> differsNotes;  // chip → "A predicts …, B predicts …" (marked chips only)
  std::vector<QRect> rects;  // per chip, laid out for the current width
  int fed = 0, current = -1;

  static constexpr int kPad = 4, kGap = 3, kLineGap = 4;
  int lineHeight() const { return fontMetrics().height() + 2 * kPad - 2; }

  QString display(int i) const {
    const TokenStrip::Chip& c = chips[i];
    if (c.text.isEmpty()) return QStringLiteral("#%1").arg(c.id);
    QString t = c.text;
    t.replace(QLatin1Char('\n'), QStringLiteral("↵"));
    t.replace(QLatin1Char('\t'), QStringLiteral("⇥"));
    if (t.startsWith(QLatin1Char(' '))) t[0] = QChar(0x00B7);  // a leading space shown as a dot
    if (t.trimmed().isEmpty()) t = QStringLiteral("␣");
    return t;
  }
  QFont chipFont(int i) const {
    QFont f = font();
    f.setItalic(chips[i].special);
    return f;
  }
  int measure(int i) const { return QFontMetrics(chipFont(i)).horizontalAdvance(display(i)) + 2 * kPad; }

  void relayout() {
    const int w = std::max(100, width());
    rects.resize(chips.size());
    int x = kGap, y = kGap;
    const int h = lineHeight();
    for (size_t i = 0; i < chips.size(); ++i) {
      const int cw = std::min(widths[i], w - 2 * kGap);
      if (x > kGap && x + cw > w - kGap) {
        x = kGap;
        y += h + kLineGap;
      }
      rects[i] = QRect(x, y, cw, h);
      x += cw + kGap;
    }
    const int total = chips.empty() ? h + 2 * kGap : rects.back().bottom() + kGap + kLineGap;
    if (height() != total) setFixedHeight(total);
    update();
  }

  int indexAt(const QPoint& p) const {
    // Lines are in increasing y: binary search the first chip whose bottom is below p.
    auto it = std::lower_bound(rects.begin(), rects.end(), p.y(), [](const QRect& r, int y) { return r.bottom() < y; });
    for (; it != rects.end() && it->top() <= p.y(); ++it)
      if (it->contains(p)) return static_cast<int>(it - rects.begin());
    return -1;
  }

 protected:
  void resizeEvent(QResizeEvent* e) override {
    QWidget::resizeEvent(e);
    relayout();
  }
  void paintEvent(QPaintEvent* e) override {
    QPainter p(this);
    const QPalette& pal = palette();
    const bool dark = pal.color(QPalette::Window).lightness() < 128;
    const QColor promptBg = dark ? QColor(60, 70, 90) : QColor(221, 230, 245);
    const QColor genBg = dark ? QColor(52, 84, 60) : QColor(214, 238, 214);
    const QColor pendingFg = pal.color(QPalette::Disabled, QPalette::Text);
    const QColor curBg = dark ? QColor(214, 140, 40) : QColor(255, 176, 64);
    const QColor specialEdge = dark ? QColor(170, 170, 170) : QColor(110, 110, 110);  // grey in both themes
    const QRect clip = e->rect();
    auto it =
        std::lower_bound(rects.begin(), rects.end(), clip.top(), [](const QRect& r, int y) { return r.bottom() < y; });
    for (; it != rects.end() && it->top() <= clip.bottom(); ++it) {
      const int i = static_cast<int>(it - rects.begin());
      const QRect r = *it;
      const bool pending = i >= fed;
      QColor bg = chips[i].generated ? genBg : promptBg;
      if (pending) bg = pal.color(QPalette::Base);
      if (i == current) bg = curBg;
      const bool special = chips[i].special;
      if (pending)
        p.setPen(QPen(pendingFg, 1, Qt::DashLine));
      else if (special)
        p.setPen(QPen(specialEdge, 1, Qt::DotLine));  // a special token: dotted grey outline, italic text
      else
        p.setPen(QPen(bg.darker(130)));
      p.setBrush(bg);
      p.drawRoundedRect(r.adjusted(0, 0, -1, -1), 3, 3);
      p.setPen(pending ? pendingFg : (i == current ? QColor(Qt::black) : pal.color(QPalette::Text)));
      const QFont f = chipFont(i);
      p.setFont(f);
      p.drawText(r.adjusted(kPad, 0, -kPad + 2, 0), Qt::AlignVCenter | Qt::AlignLeft,
                 QFontMetrics(f).elidedText(display(i), Qt::ElideRight, r.width() - 2 * kPad + 2));
      if (chips[i].differs) {
        p.setPen(QPen(dark ? QColor(255, 110, 110) : QColor(200, 30, 30), 2));
        p.drawLine(r.left() + 2, r.bottom() + 2, r.right() - 2, r.bottom() + 2);
      }
    }
  }
  void mousePressEvent(QMouseEvent* e) override {
    const int i = indexAt(e->position().toPoint());
    if (e->button() == Qt::LeftButton && i >= 0 && i < fed) emit strip_->tokenClicked(i);
  }
  bool event(QEvent* e) override {
    if (e->type() == QEvent::ToolTip) {
      auto* he = static_cast<QHelpEvent*>(e);
      const int i = indexAt(he->pos());
      if (i < 0) {
        QToolTip::hideText();
        return true;
      }
      QToolTip::showText(he->globalPos(), strip_->chipToolTip(i),
                         this);
      return true;
    }
    if (e->type() == QEvent::FontChange) {
      for (size_t i = 0; i < chips.size(); ++i) widths[i] = measure(static_cast<int>(i));
      relayout();
    }
    return QWidget::event(e);
  }

 private:
  TokenStrip* strip_;
};

TokenStrip::TokenStrip(QWidget* parent) : QScrollArea(parent) {
  canvas_ = new TokenCanvas(this);
  setWidget(canvas_);
  setWidgetResizable(true);
  setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  setFrameShape(QFrame::StyledPanel);
  setMinimumHeight(canvas_->lineHeight() + 12);
  canvas_->relayout();
}

void TokenStrip::setTokens(const std::vector<Chip>& chips, int fed) {
  canvas_->chips = chips;
  canvas_->differsNotes.clear();
  canvas_->widths.resize(chips.size());
  for (size_t i = 0; i < chips.size(); ++i) canvas_->widths[i] = canvas_->measure(static_cast<int>(i));
  canvas_->fed = std::clamp(fed, 0, static_cast<int>(chips.size()));
  canvas_->current = -1;
  canvas_->relayout();
}

void TokenStrip::feed(const Chip& chip) {
  TokenCanvas& c = *canvas_;
  const int i = c.fed;
  if (i < static_cast<int>(c.chips.size()) && c.chips[i].id == chip.id) {
    c.chips[i] = chip;
    c.widths[i] = c.measure(i);
  } else {
    // A different token than the pending one (or none pending): the pending rest is dropped.
    c.chips.resize(i);
    c.widths.resize(i);
    c.differsNotes.erase(c.differsNotes.lower_bound(i), c.differsNotes.end());
    c.chips.push_back(chip);
    c.widths.push_back(c.measure(i));
  }
  c.fed = i + 1;
  c.relayout();
}

void TokenStrip::setDiffers(int index, bool differs, const QString& note) {
  if (index < 0 || index >= count()) return;
  Chip& c = canvas_->chips[index];
  if (differs && !note.isEmpty())
    canvas_->differsNotes[index] = note;
  else
    canvas_->differsNotes.erase(index);
  if (c.differs == differs) return;
  c.differs = differs;
  canvas_->update(canvas_->rects[index].adjusted(0, 0, 0, 4));
}

QString TokenStrip::chipToolTip(int i) const {
  if (i < 0 || i >= count()) return QString();
  const Chip& c = canvas_->chips[i];
  QString t = tr("token %1 · id %2 · “%3” · %4%5")
                  .arg(i)
                  .arg(c.id)
                  .arg(c.text)
                  .arg(c.generated ? tr("generated") : tr("prompt"))
                  .arg(i >= canvas_->fed ? tr(" (not fed yet)") : QString());
  if (c.special) t += tr(" · special token");
  if (c.differs) {
    const auto note = canvas_->differsNotes.find(i);
    t += QLatin1Char('\n') + tr("red underline: run B's top-1 next token differs from run A's") +
         (note == canvas_->differsNotes.end() ? QString() : QStringLiteral(" — ") + note->second);
  }
  return t;
}

void TokenStrip::setCurrent(int index) {
  if (index == canvas_->current) return;
  canvas_->current = index;
  canvas_->update();
  if (index >= 0 && index < count()) {
    const QRect r = canvas_->rects[index];
    ensureVisible(r.center().x(), r.center().y(), 8, r.height());
  }
}

int TokenStrip::count() const {
  return static_cast<int>(canvas_->chips.size());
}
int TokenStrip::fedCount() const {
  return canvas_->fed;
}
int TokenStrip::current() const {
  return canvas_->current;
}
const TokenStrip::Chip& TokenStrip::chip(int i) const {
  return canvas_->chips.at(i);
}
QString TokenStrip::displayText(int i) const {
  return canvas_->display(i);
}
QRect TokenStrip::chipRect(int i) const {
  return canvas_->rects.at(i);
}
QWidget* TokenStrip::canvas() const {
  return canvas_;
}

}  // namespace hl::app
