// The main window on Qt's offscreen platform: it shows with its menus and status bar, loads a
// generated checkpoint on its worker thread and lists the layer ribbon, and a failed load reports
// the error and keeps the previous model. The full app's GUI tests come with the app issue.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <QApplication>
#include <QElapsedTimer>
#include <QMenuBar>
#include <QStatusBar>
#include <QTreeWidget>
#include <filesystem>
#include <string>

#include "app/main_window.h"
#include "engine/model/generator.h"

namespace fs = std::filesystem;

namespace {

// Runs the event loop until `done` or 60 s.
template <typename Pred>
bool waitFor(Pred done) {
  QElapsedTimer t;
  t.start();
  while (!done() && t.elapsed() < 60000) QApplication::processEvents(QEventLoop::AllEvents, 20);
  return done();
}

QString menuTitles(QMenuBar* bar) {
  QString s;
  for (QAction* a : bar->actions()) s += a->text() + ";";
  return s;
}

}  // namespace

TEST(MainWindow, Constructed_ShowsWithMenusAndStatusBar) {
  hl::app::MainWindow w;
  w.show();
  EXPECT_TRUE(w.isVisible());
  EXPECT_EQ(menuTitles(w.menuBar()), QString("&File;&Help;"));
  EXPECT_NE(w.findChild<QAction*>("actionOpen"), nullptr);
  EXPECT_NE(w.findChild<QAction*>("actionQuit"), nullptr);
  EXPECT_NE(w.findChild<QAction*>("actionAbout"), nullptr);
  EXPECT_EQ(w.statusBar()->currentMessage(), QString("Ready"));
  EXPECT_EQ(w.ribbonView()->topLevelItemCount(), 0);
}

TEST(MainWindow, OpenCheckpoint_ListsLayerRibbon_ThenBadFolderKeepsModel) {
  const fs::path dir = fs::temp_directory_path() / ("hl_gui_test_" + std::to_string(::getpid()));
  hl::GenerateOptions o;
  o.config = hl::preset_config("demo-random");  // 8 layers, attention at i % 4 == 2, MoE on odd layers
  hl::generate_checkpoint(dir.string(), o);

  hl::app::MainWindow w;
  w.show();
  bool loaded = false, failed = false;
  QObject::connect(&w, &hl::app::MainWindow::modelLoaded, [&] { loaded = true; });
  QObject::connect(&w, &hl::app::MainWindow::loadFailed, [&] { failed = true; });
  ASSERT_TRUE(w.openCheckpoint(QString::fromStdString(dir.string())));
  ASSERT_TRUE(waitFor([&] { return loaded || failed; }));
  ASSERT_TRUE(loaded);
  QTreeWidget* ribbon = w.ribbonView();
  ASSERT_EQ(ribbon->topLevelItemCount(), 8);
  const char* mixers[] = {"Mamba", "Mamba", "attention", "Mamba", "Mamba", "Mamba", "attention", "Mamba"};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(ribbon->topLevelItem(i)->text(1), QString(mixers[i])) << "layer " << i;
    EXPECT_EQ(ribbon->topLevelItem(i)->text(2), QString(i % 2 ? "MoE" : "dense MLP")) << "layer " << i;
  }
  auto model = w.model();

  ASSERT_TRUE(w.openCheckpoint(QString::fromStdString((dir / "no-such-folder").string())));
  ASSERT_TRUE(waitFor([&] { return failed; }));
  EXPECT_EQ(w.model(), model);
  EXPECT_EQ(ribbon->topLevelItemCount(), 8);
  fs::remove_all(dir);
}

int main(int argc, char** argv) {
  ::setenv("QT_QPA_PLATFORM", "offscreen", 1);
  QApplication app(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
