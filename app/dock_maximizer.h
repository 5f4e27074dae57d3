// DockMaximizer: lets one instrument dock fill the main window and puts the layout back — by a
// double-click on the dock's title, View > Maximise view (Ctrl+M, the dock under the mouse or the
// last one clicked) or toggle(). It saves the window state before and restores it after; it never
// closes docks. Not the layout itself (MainWindow::arrangeDefaultDocks).
#pragma once
#include <QByteArray>
#include <QDockWidget>
#include <QObject>
#include <QPointer>
#include <vector>

class QMainWindow;

namespace hl::app {

class DockMaximizer : public QObject {
  Q_OBJECT

 public:
  DockMaximizer(QMainWindow* window, const std::vector<QDockWidget*>& docks);
  // Maximises `dock` (null: the dock under the mouse, else the last one clicked), or restores the
  // layout when a dock is maximised already.
  void toggle(QDockWidget* dock = nullptr);
  void restore();
  QDockWidget* maximized() const { return maximized_; }

 protected:
  bool eventFilter(QObject* obj, QEvent* ev) override;

 private:
  QMainWindow* window_;
  std::vector<QDockWidget*> docks_;
  QPointer<QDockWidget> maximized_, last_;
  QByteArray saved_;
  bool centralWasVisible_ = true;
};

}  // namespace hl::app
