// AttentionHeadGrid: every head of one attention layer as a small heatmap in a grid (query rows ×
// key columns, as the attention pattern draws one head), the focused head framed; a click on a
// head emits headClicked. It only paints images the view rendered; no trace access here.
#pragma once
#include <QImage>
#include <QString>
#include <QVector>
#include <QWidget>

namespace hl::views {

class AttentionHeadGrid : public QWidget {
  Q_OBJECT

 public:
  explicit AttentionHeadGrid(QWidget* parent = nullptr);
  // One image per head (index = head), drawn in a near-square grid; `focused` gets a frame.
  void setHeads(const QVector<QImage>& images, int focused, const QString& caption);
  int headCount() const { return static_cast<int>(images_.size()); }
  // The grid's columns and the rectangle head `h` is drawn in at the current size.
  int columns() const;
  QRect cellRect(int h) const;
  // The head under `pos`, or -1.
  int headAt(const QPoint& pos) const;
  // Pixel size a head image should have to fill its cell (the view renders at this size).
  QSize thumbnailSize() const;

 signals:
  void headClicked(int head);

 protected:
  void paintEvent(QPaintEvent* e) override;
  void mouseReleaseEvent(QMouseEvent* e) override;
  void mouseMoveEvent(QMouseEvent* e) override;

 private:
  QVector<QImage> images_;
  int focused_ = -1;
  QString caption_;
};

}  // namespace hl::views
