// The layer ribbon's cell texts fit their cells at any size (issue 17 finding 5: "MLP 128" ran over
// "MoE experts" in a narrow dock): each label is the longest of the long form, its first line or the
// layer's letter that fits, or none; wide enough, every cell of the expanded block names its layer.
#include <gtest/gtest.h>

#include <QApplication>
#include <QFontMetrics>
#include <QTabBar>
#include <memory>

#include "tests/views/view_test_util.h"
#include "views/instrument_views.h"

using hl::test::demoState;
using namespace hl::views;

namespace {

// Labels of the expanded block (the second panel) and whether each fits its cell.
struct Labels {
  int count = 0, overflowing = 0;
  QStringList texts;
};

Labels blockLabels(LayerRibbonView& v) {
  Labels out;
  QCPAxisRect* block = v.plot()->axisRect(v.plot()->axisRectCount() - 1);
  const double cellPx = std::fabs(block->axis(QCPAxis::atBottom)->coordToPixel(0.45) -
                                  block->axis(QCPAxis::atBottom)->coordToPixel(-0.45));
  for (int i = 0; i < v.plot()->itemCount(); ++i) {
    auto* t = qobject_cast<QCPItemText*>(v.plot()->item(i));
    if (!t || t->clipAxisRect() != block) continue;
    ++out.count;
    out.texts << t->text();
    const QFontMetrics fm(t->font());
    for (const QString& line : t->text().split('\n'))
      if (fm.horizontalAdvance(line) > cellPx) {
        ++out.overflowing;
        break;
      }
  }
  return out;
}

TEST(LayerRibbonView, CellTextsFitTheirCells_NarrowAndWide) {
  auto v = std::make_unique<LayerRibbonView>();
  v->resize(1400, 300);
  v->show();
  v->setState(demoState(3, 5));
  QApplication::processEvents();
  Labels wide = blockLabels(*v);
  EXPECT_EQ(wide.overflowing, 0) << wide.texts.join(" | ").toStdString();
  EXPECT_TRUE(wide.texts.join(' ').contains("experts")) << wide.texts.join(" | ").toStdString();  // the long form

  v->resize(260, 260);  // a narrow dock: the long texts would run over their neighbours
  QApplication::processEvents();
  QApplication::processEvents();
  if (v->panelsFolded()) {  // too low for both panels: the block is its second tab
    auto* tabs = v->findChild<QTabBar*>(QStringLiteral("panelTabs"));
    ASSERT_NE(tabs, nullptr);
    tabs->setCurrentIndex(1);
    QApplication::processEvents();
  }
  Labels narrow = blockLabels(*v);
  EXPECT_EQ(narrow.overflowing, 0) << narrow.texts.join(" | ").toStdString();
  EXPECT_FALSE(narrow.texts.join(' ').contains("experts")) << narrow.texts.join(" | ").toStdString();
}

}  // namespace
