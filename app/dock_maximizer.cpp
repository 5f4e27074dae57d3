// DockMaximizer (see dock_maximizer.h): maximise = save the window state, hide the other docks and
// the centre; restore = the saved state. A double-click on a docked title bar maximises instead of
// floating the dock (Qt's default); floating docks keep Qt's behaviour.
#include "app/dock_maximizer.h"

#include <QApplication>
#include <QCursor>
#include <QDockWidget>
#include <QMainWindow>
#include <QMouseEvent>
#include <QStyle>

namespace hl::app {

DockMaximizer::DockMaximizer(QMainWindow* window, const std::vector<QDockWidget*>& docks)
    : QObject(window), window_(window), docks_(docks) {
  for (QDockWidget* d : docks_) d->installEventFilter(this);
}

void DockMaximizer::toggle(QDockWidget* dock) {
  if (maximized_) {
    restore();
    return;
  }
  if (!dock) {
    for (QWidget* w = QApplication::widgetAt(QCursor::pos()); w && !dock; w = w->parentWidget())
      dock = qobject_cast<QDockWidget*>(w);
  }
  if (!dock) dock = last_;
  if (!dock || dock->isFloating()) return;
  saved_ = window_->saveState();
  centralWasVisible_ = window_->centralWidget() && window_->centralWidget()->isVisible();
  maximized_ = dock;
  for (QDockWidget* d : docks_)
    if (d != dock) d->hide();
  if (window_->centralWidget()) window_->centralWidget()->hide();
  dock->show();
  dock->raise();
  dock->setWindowTitle(dock->windowTitle() + tr(" — maximised (double-click the title or Ctrl+M to restore)"));
}

void DockMaximizer::restore() {
  if (!maximized_) return;
  QDockWidget* d = maximized_;
  maximized_ = nullptr;
  d->setWindowTitle(d->windowTitle().section(tr(" — maximised"), 0, 0));
  if (window_->centralWidget() && centralWasVisible_) window_->centralWidget()->show();
  window_->restoreState(saved_);
}

bool DockMaximizer::eventFilter(QObject* obj, QEvent* ev) {
  auto* dock = qobject_cast<QDockWidget*>(obj);
  if (!dock) return QObject::eventFilter(obj, ev);
  if (ev->type() == QEvent::MouseButtonPress) last_ = dock;
  if (ev->type() == QEvent::MouseButtonDblClick && !dock->isFloating()) {
    // The title bar is the strip above the dock's widget.
    const int titleBottom = dock->widget() ? dock->widget()->geometry().top() : 0;
    if (static_cast<QMouseEvent*>(ev)->position().y() < titleBottom) {
      toggle(dock);
      return true;
    }
  }
  return QObject::eventFilter(obj, ev);
}

}  // namespace hl::app
