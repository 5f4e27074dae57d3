// Views at any dock size (issue 17 item 4, finding 5): a view too small for all its panels folds
// to one cell of its panel grid with a tab bar to pick it, keeps that pick across redraws, unfolds
// when there is room, and exports every panel whatever it shows; legends are strips above their
// panel, wrapped to its width, over no data.
#include <gtest/gtest.h>

#include <QApplication>
#include <QFile>
#include <QTabBar>
#include <memory>

#include "tests/views/view_test_util.h"
#include "views/instrument_views.h"
#include "views/panel_layout.h"

using hl::test::demoState;
using namespace hl::views;

namespace {

void settle() {
  for (int i = 0; i < 3; ++i) QApplication::processEvents();
}

// Left-axis labels of the panels the plot lays out now.
QStringList shownPanels(const InstrumentView& v) {
  QStringList out;
  for (QCPAxisRect* r : v.plot()->axisRects()) out << r->axis(QCPAxis::atLeft)->label();
  return out;
}

// Items drawn (visible) that belong to a panel not laid out: they would float over the plot.
int strayItems(const InstrumentView& v) {
  const QList<QCPAxisRect*> shown = v.plot()->axisRects();
  int n = 0;
  for (int i = 0; i < v.plot()->itemCount(); ++i) {
    QCPAbstractItem* it = v.plot()->item(i);
    if (it->visible() && it->clipAxisRect() && !shown.contains(it->clipAxisRect())) ++n;
  }
  return n;
}

TEST(PanelFold, SmallDock_ShowsOneCellAtATime_RoomyDockShowsAll) {
  auto v = std::make_unique<RouterView>();
  v->resize(1000, 760);
  v->show();
  v->setState(demoState(5, 1, true));
  settle();
  auto* tabs = v->findChild<QTabBar*>(QStringLiteral("panelTabs"));
  ASSERT_NE(tabs, nullptr);
  EXPECT_FALSE(v->panelsFolded());
  EXPECT_FALSE(tabs->isVisible());
  EXPECT_EQ(v->plot()->axisRectCount(), 4);
  EXPECT_EQ(v->panelNames(), QStringList({"load", "probabilities", "balance", "max load"}));

  v->resize(620, 230);  // a laptop's quarter-screen dock: four panels would be slivers
  settle();
  ASSERT_TRUE(v->panelsFolded());
  EXPECT_TRUE(tabs->isVisible());
  ASSERT_EQ(tabs->count(), 4);
  EXPECT_EQ(tabs->tabText(3), QStringLiteral("max load"));
  ASSERT_EQ(v->plot()->axisRectCount(), 1);
  QCPAxisRect* shown = v->plot()->axisRect(0);
  EXPECT_GE(shown->rect().height(), PanelLayout::kMinPanelHeight);
  EXPECT_EQ(strayItems(*v), 0);

  tabs->setCurrentIndex(2);
  settle();
  ASSERT_EQ(shownPanels(*v).size(), 1);
  EXPECT_TRUE(shownPanels(*v)[0].startsWith(QStringLiteral("balance"))) << shownPanels(*v)[0].toStdString();
  EXPECT_EQ(strayItems(*v), 0);
  // A new step redraws on the whole layout and folds back to the same pick.
  v->setState(demoState(6, 1, true));
  settle();
  EXPECT_EQ(tabs->currentIndex(), 2);
  ASSERT_EQ(shownPanels(*v).size(), 1);
  EXPECT_TRUE(shownPanels(*v)[0].startsWith(QStringLiteral("balance")));

  // The figure shows every panel whatever the dock shows; the dock is as it was after.
  const QString svg = QString::fromStdString(hl::test::tempDir("fold")) + "/router.svg";
  QString err;
  ASSERT_TRUE(v->exportFigure(svg, "svg", 1200, 900, 96, &err)) << err.toStdString();
  QFile f(svg);
  ASSERT_TRUE(f.open(QIODevice::ReadOnly));
  const QString text = QString::fromUtf8(f.readAll());
  for (const char* label : {"fraction", "router probability", "balance loss", "max load"})
    EXPECT_TRUE(text.contains(QLatin1String(label))) << label;
  EXPECT_TRUE(v->panelsFolded());
  EXPECT_EQ(v->plot()->axisRectCount(), 1);

  v->resize(1000, 760);
  settle();
  EXPECT_FALSE(v->panelsFolded());
  EXPECT_FALSE(tabs->isVisible());
  EXPECT_EQ(v->plot()->axisRectCount(), 4);
  EXPECT_EQ(strayItems(*v), 0);
}

TEST(PanelFold, LegendStrip_WrapsToItsPanel_AndCoversNoData) {
  auto v = std::make_unique<MemoryView>();
  v->resize(1200, 500);
  v->show();
  v->setState(demoState(8, -1, true));
  settle();
  QCPLegend* lg = nullptr;
  for (QCPLayoutElement* e : v->plot()->plotLayout()->elements(true))
    if (auto* l = qobject_cast<QCPLegend*>(e); l && l->itemCount() > 0) lg = l;
  ASSERT_NE(lg, nullptr);
  ASSERT_GE(lg->itemCount(), 4);
  const int wideRows = lg->rowCount();
  auto checkPlacement = [&] {
    const QRect box = lg->outerRect();
    for (QCPAxisRect* r : v->plot()->axisRects()) EXPECT_FALSE(r->rect().intersects(box));
    const QSize need = lg->minimumOuterSizeHint();
    EXPECT_GE(box.width() + 1, need.width());
    EXPECT_GE(box.height() + 1, need.height());
  };
  checkPlacement();
  v->resize(420, 500);
  settle();
  EXPECT_GT(lg->rowCount(), wideRows);  // narrower panel, more rows
  EXPECT_LE(lg->outerRect().right(), v->plot()->viewport().right() + 1);
  checkPlacement();
}

}  // namespace
