// The main window, minimal for now: File (Open checkpoint…, Quit) and Help (About) menus, a status
// bar, and the loaded checkpoint's layer ribbon (DL0171 Figure 1) as a table. Loading runs on a
// worker thread; the GUI thread never waits on it. The docked instrument views come later.
#pragma once
#include <QMainWindow>
#include <QPointer>
#include <QString>
#include <memory>

class QLabel;
class QThread;
class QTreeWidget;

namespace hl {
struct Model;
}

namespace hl::app {

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  // Starts loading `dir` in the background; modelLoaded or loadFailed follows. While a load runs,
  // another request is refused (returns false). On failure the current model stays.
  bool openCheckpoint(const QString& dir);
  bool isLoading() const { return !loader_.isNull(); }
  std::shared_ptr<const hl::Model> model() const { return model_; }
  QTreeWidget* ribbonView() const { return ribbon_; }

 signals:
  void modelLoaded(const QString& dir);
  void loadFailed(const QString& message);

 private:
  void createMenus();
  void chooseCheckpoint();
  void showAbout();
  void finishLoad(const QString& dir, std::shared_ptr<const hl::Model> model, const QString& error);
  void showModel();

  std::shared_ptr<const hl::Model> model_;
  QPointer<QThread> loader_;
  QLabel* summary_ = nullptr;
  QTreeWidget* ribbon_ = nullptr;
};

}  // namespace hl::app
