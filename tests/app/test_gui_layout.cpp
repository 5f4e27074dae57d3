// The window on a laptop screen and its help (issue 17 items 4, 6, 7 and findings 5, 9, 10): the
// main window fits 1280 × 720; at 1280 × 720 and 1920 × 1200 no label, button, plot title, axis
// label or colour-bar label is clipped (legends: a disabled test, see below); a view can be
// maximised and restored; every control has a tooltip or What's This; Help > Instruments shows the
// shipped page with a section per view and the papers; counts read "1 token"; fine-tunes sort
// naturally. Offscreen (label gui).
#include <gtest/gtest.h>

#include <QAbstractButton>
#include <QSettings>
#include <algorithm>
#include <cmath>
#include <QAbstractSpinBox>
#include <QComboBox>
#include <QDialog>
#include <QDockWidget>
#include <QLabel>
#include <QLineEdit>
#include <QMenuBar>
#include <QSpinBox>
#include <QStatusBar>
#include <QTabBar>
#include <QTextBrowser>
#include <qcustomplot.h>

#include "app/app_settings.h"
#include "app/dock_maximizer.h"
#include "app/help_dialog.h"
#include "app/token_strip.h"
#include "views/panel_layout.h"
#include "tests/app/gui_test_util.h"
#include "views/instrument_view.h"
#include "views/view_util.h"

using namespace hl::test;

namespace {

bool qtInternal(const QWidget* w) {
  for (const QWidget* p = w; p; p = p->parentWidget())
    if (p->objectName().startsWith(QLatin1String("qt_")) || qobject_cast<const QTabBar*>(p) ||
        qstrcmp(p->metaObject()->className(), "QTableCornerButton") == 0)  // a table's own corner
      return true;
  return false;
}

// Text that does not fit where it is drawn, one line per problem, for every visible widget under
// `root` and every plot of the visible instrument views; with `legends`, also legends outside
// their panel or over plotted points.
QStringList clippedText(QWidget* root, bool legends) {
  QStringList bad;
  for (QLabel* l : root->findChildren<QLabel*>()) {
    if (!l->isVisible() || l->text().isEmpty() || qtInternal(l) || l->textFormat() == Qt::RichText) continue;
    if (Qt::mightBeRichText(l->text()) && l->textFormat() != Qt::PlainText) continue;
    if (l->sizePolicy().horizontalPolicy() == QSizePolicy::Ignored) continue;  // elided on purpose
    const QRect r = l->contentsRect();
    if (l->wordWrap() ? l->heightForWidth(l->width()) > l->height() + 1
                      : l->fontMetrics().horizontalAdvance(l->text()) > r.width() + 1)
      bad << QStringLiteral("label %1 “%2”: %3 × %4").arg(l->objectName(), l->text()).arg(l->width()).arg(l->height());
  }
  for (QAbstractButton* b : root->findChildren<QAbstractButton*>()) {
    if (!b->isVisible() || b->text().isEmpty() || qtInternal(b)) continue;
    if (b->sizeHint().width() > b->width() + 1)
      bad << QStringLiteral("button %1 “%2”: %3 px < %4").arg(b->objectName(), b->text()).arg(b->width()).arg(b->sizeHint().width());
  }
  for (hl::views::InstrumentView* v : root->findChildren<hl::views::InstrumentView*>()) {
    if (!v->isVisible() || !v->plot()->isVisible()) continue;
    QCustomPlot* p = v->plot();
    p->replot(QCustomPlot::rpImmediateRefresh);
    const QString id = v->viewId();
    for (QCPLayoutElement* e : p->plotLayout()->elements(true)) {
      if (auto* t = qobject_cast<QCPTextElement*>(e)) {
        const QFontMetrics fm(t->font());
        for (const QString& line : t->text().split('\n'))
          if (fm.horizontalAdvance(line) > p->width())
            bad << QStringLiteral("%1: title line “%2” wider than %3 px").arg(id, line).arg(p->width());
      }
      if (auto* cs = qobject_cast<QCPColorScale*>(e)) {
        const QFontMetrics fm(cs->axis()->labelFont());
        if (cs->visible() && fm.horizontalAdvance(cs->axis()->label()) > cs->outerRect().height())
          bad << QStringLiteral("%1: colour-bar label “%2” longer than the bar (%3 px)")
                     .arg(id, cs->axis()->label())
                     .arg(cs->outerRect().height());
      }
    }
    for (QCPAxisRect* r : p->axisRects()) {
      if (!r->visible()) continue;
      for (QCPAxis* a : r->axes()) {
        if (!a->visible() || a->label().isEmpty()) continue;
        const int room = a->orientation() == Qt::Horizontal ? r->outerRect().width() : r->outerRect().height();
        const QFontMetrics fm(a->labelFont());
        for (const QString& line : a->label().split('\n'))
          if (fm.horizontalAdvance(line) > room)
            bad << QStringLiteral("%1: axis label “%2” longer than its axis (%3 px)").arg(id, line).arg(room);
      }
      // A panel too small to read: the view should have folded (one cell shown at a time).
      if (legends && (r->rect().height() < hl::views::PanelLayout::kMinPanelHeight ||
                      r->rect().width() < hl::views::PanelLayout::kMinPanelWidth))
        bad << QStringLiteral("%1: a panel of %2 x %3 px").arg(id).arg(r->rect().width()).arg(r->rect().height());
    }
    // Labels on a panel (marks, bands, figures lines): drawn whole inside it, not cut at its edge.
    for (int i = 0; i < p->itemCount(); ++i) {
      auto* t = qobject_cast<QCPItemText*>(p->item(i));
      if (!t || !t->realVisibility() || !t->clipToAxisRect() || !t->clipAxisRect() || t->text().isEmpty() ||
          t->rotation() != 0)
        continue;
      const QRect box = QRectF(t->topLeft->pixelPosition(), t->bottomRight->pixelPosition()).toRect().normalized();
      const QRect panel = t->clipAxisRect()->rect();
      if (!panel.intersects(box)) continue;  // off the shown range (scrolled away): not drawn at all
      if (box.left() < panel.left() - 2 || box.right() > panel.right() + 2)
        bad << QStringLiteral("%1: label “%2” cut at its panel's edge").arg(id, t->text());
    }
    if (!legends) continue;
    // Legends: whole (no row or column cut off), inside the plot, and over no panel's data.
    for (QCPLayoutElement* e : p->plotLayout()->elements(true)) {
      auto* lg = qobject_cast<QCPLegend*>(e);
      if (!lg || !lg->realVisibility() || lg->itemCount() == 0) continue;
      const QRect box = lg->outerRect();
      const QSize need = lg->minimumOuterSizeHint();
      if (box.width() + 1 < need.width() || box.height() + 1 < need.height() ||
          !p->viewport().adjusted(-1, -1, 1, 1).contains(box))
        bad << QStringLiteral("%1: legend %2x%3 in %4x%5 px").arg(id).arg(need.width()).arg(need.height())
                   .arg(box.width()).arg(box.height());
      for (QCPAxisRect* r : p->axisRects()) {
        if (!r->realVisibility() || !r->rect().intersects(box)) continue;
        int covered = 0;
        for (QCPGraph* g : r->graphs()) {
          if (!g->visible()) continue;
          for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it) {
            if (!std::isfinite(it->value)) continue;
            const QPointF px = g->coordsToPixels(it->key, it->value);
            if (r->rect().contains(px.toPoint()) && box.contains(px.toPoint())) ++covered;
          }
        }
        bad << QStringLiteral("%1: legend over a panel's data (%2 points under it)").arg(id).arg(covered);
      }
    }
  }
  return bad;
}

// Loads the demo, steps 12 tokens with a softmax-1 run B.
void loadWithB(Harness& h) {
  ASSERT_TRUE(h.load(demoDir()));
  ignoreEos(h);
  ASSERT_TRUE(h.step(12));
  ASSERT_TRUE(toggle(h, [](hl::app::Toggles& t) {
    t.normalizerOverride = true;
    t.normalizer = hl::Normalizer::Softmax1;
  }));
}

// Every dock raised in turn at window size `size`, in the default layout for that size: no clipped
// text anywhere.
void expectNothingClipped(Harness& h, QSize size, bool legends = false) {
  h->resize(size);
  QApplication::processEvents();
  // The default layout for this window height (the compact one under 960 px).
  QAction* reset = h->findChild<QAction*>("actionResetLayout");
  ASSERT_NE(reset, nullptr);
  reset->trigger();
  QApplication::processEvents();
  h->updateAllViews();
  QStringList bad;
  for (QDockWidget* d : h->findChildren<QDockWidget*>()) {
    d->raise();
    QApplication::processEvents();
    h->updateAllViews();
    bad << clippedText(h.w.get(), legends);
  }
  bad.removeDuplicates();
  EXPECT_TRUE(bad.isEmpty()) << size.width() << " x " << size.height() << ":\n" << bad.join('\n').toStdString();
}

}  // namespace

TEST(Layout, MinimumWindow_FitsA1280x720Laptop) {
  Harness h;
  const QSize min = h->minimumSizeHint().expandedTo(h->minimumSize());
  EXPECT_LE(min.width(), 1280) << min.width() << " x " << min.height();
  EXPECT_LE(min.height(), 680) << min.width() << " x " << min.height();  // 720 less a panel and title bar
  h->resize(1280, 680);
  QApplication::processEvents();
  EXPECT_EQ(h->size(), QSize(1280, 680));
}

TEST(Layout, NoClippedTextOrCoveredPoints_At1280x720) {
  Harness h;
  loadWithB(h);
  expectNothingClipped(h, QSize(1280, 680));
}

TEST(Layout, NoClippedTextOrCoveredPoints_At1920x1200) {
  Harness h;
  loadWithB(h);
  expectNothingClipped(h, QSize(1920, 1160));
}

// Legends whole and off every panel's data, and no panel squeezed below a readable plot area:
// at these sizes several docks are too small for all their panels, and the views fold.
TEST(Layout, NoLegendOverDataOrSqueezedPanel_At1280x720) {
  Harness h;
  loadWithB(h);
  expectNothingClipped(h, QSize(1280, 680), true);
}

TEST(Layout, NoLegendOverDataOrSqueezedPanel_At1920x1200) {
  Harness h;
  loadWithB(h);
  expectNothingClipped(h, QSize(1920, 1160), true);
}

// Reset layout on a laptop-high window stacks the views in two tab stacks (each twice as high as
// in the grid); on a tall one it gives the 2 × 2 grid.
TEST(Layout, ResetLayout_PicksTheGridOrTheCompactRowByWindowHeight) {
  Harness h;
  QAction* reset = h->findChild<QAction*>("actionResetLayout");
  ASSERT_NE(reset, nullptr);
  auto dock = [&](const char* id) { return h->findChild<QDockWidget*>(QStringLiteral("dock_") + id); };
  auto stackOf = [&](const char* id) {
    QStringList ids{QString::fromLatin1(id)};
    for (QDockWidget* d : h->tabifiedDockWidgets(dock(id))) ids << d->objectName().mid(5);
    ids.sort();
    return ids;
  };
  h->resize(1920, 1160);
  QApplication::processEvents();
  reset->trigger();
  QApplication::processEvents();
  EXPECT_EQ(stackOf("entropy"), QStringList({"entropy", "latency", "rank1"}));
  EXPECT_EQ(stackOf("attention"), QStringList({"attention", "outliers"}));
  h->resize(1280, 680);
  QApplication::processEvents();
  reset->trigger();
  QApplication::processEvents();
  EXPECT_EQ(stackOf("entropy"), QStringList({"entropy", "latency", "memory", "rank1", "ssm_delta"}));
  EXPECT_EQ(stackOf("attention"), QStringList({"attention", "dora", "outliers", "router"}));
  EXPECT_GT(h->view("entropy")->height(), 250);
}

TEST(Layout, AViewMaximises_AndTheLayoutComesBack) {
  Harness h;
  h->resize(1280, 680);
  QApplication::processEvents();
  auto* maximizer = h->findChild<hl::app::DockMaximizer*>();
  ASSERT_NE(maximizer, nullptr);
  QDockWidget* router = h->findChild<QDockWidget*>("dock_router");
  ASSERT_NE(router, nullptr);
  router->raise();  // in the compact layout it shares a tab stack with the attention pattern
  QApplication::processEvents();
  QStringList before;
  for (QDockWidget* d : h->findChildren<QDockWidget*>())
    if (d->isVisible()) before << d->objectName();
  const QSize small = router->size();
  maximizer->toggle(router);
  QApplication::processEvents();
  for (QDockWidget* d : h->findChildren<QDockWidget*>())
    EXPECT_EQ(d->isVisible(), d == router) << d->objectName().toStdString();
  EXPECT_GT(router->width() * router->height(), 2 * small.width() * small.height());
  EXPECT_GT(router->width(), h->width() * 9 / 10);
  maximizer->toggle();
  QApplication::processEvents();
  QStringList after;
  for (QDockWidget* d : h->findChildren<QDockWidget*>())
    if (d->isVisible()) after << d->objectName();
  before.sort();  // restoring may reorder tabified docks among the window's children
  after.sort();
  EXPECT_EQ(after, before);
  EXPECT_EQ(router->size(), small);
}

TEST(Help, EveryControlHasATooltipOrWhatsThis) {
  Harness h;
  ASSERT_TRUE(h.load(demoDir()));
  QStringList missing;
  auto check = [&](QWidget* w) {
    if (qtInternal(w)) return;
    // Line edits inside spin boxes and combo boxes belong to them.
    if (qobject_cast<QLineEdit*>(w) && (qobject_cast<QAbstractSpinBox*>(w->parentWidget()) ||
                                        qobject_cast<QComboBox*>(w->parentWidget())))
      return;
    if (w->toolTip().isEmpty() && w->whatsThis().isEmpty())
      missing << QStringLiteral("%1 %2 “%3”")
                     .arg(QString::fromLatin1(w->metaObject()->className()), w->objectName(),
                          qobject_cast<QAbstractButton*>(w) ? qobject_cast<QAbstractButton*>(w)->text() : QString());
  };
  for (QWidget* w : h->findChildren<QWidget*>())
    if (qobject_cast<QAbstractButton*>(w) || qobject_cast<QComboBox*>(w) || qobject_cast<QAbstractSpinBox*>(w) ||
        qobject_cast<QLineEdit*>(w))
      check(w);
  EXPECT_TRUE(missing.isEmpty()) << missing.join('\n').toStdString();
}

TEST(Help, InstrumentsPage_ShippedWithTheApp_DefinesEveryViewAndCitesThePapers) {
  Harness h;
  QAction* a = h->findChild<QAction*>("actionInstrumentsHelp");
  ASSERT_NE(a, nullptr);
  a->trigger();
  auto* d = h->findChild<QDialog*>("instrumentsHelp");
  ASSERT_NE(d, nullptr);
  auto* browser = d->findChild<QTextBrowser*>("instrumentsBrowser");
  ASSERT_NE(browser, nullptr);
  const QString text = browser->toPlainText();
  for (hl::views::InstrumentView* v : h->views())
    EXPECT_TRUE(text.contains(v->title())) << "no section for " << v->title().toStdString();
  for (const char* cite : {"Xiao et al. 2023", "Miller 2023", "Sun et al. 2024", "Darcet et al. 2023",
                           "Dong, Cordonnier & Loukas 2021", "Gu & Dao 2023", "Lieber et al. 2024",
                           "Fedus, Zoph & Shazeer 2022", "Zoph et al. 2022", "Liu et al. 2024", "Zhai et al. 2023"})
    EXPECT_TRUE(text.contains(QString::fromUtf8(cite))) << cite;
  // The marks the views draw are explained there.
  for (const char* mark : {"healthy band", "write", "skip", "red underline", "Floor"})
    EXPECT_TRUE(text.contains(QString::fromUtf8(mark))) << mark;
  d->close();
}

TEST(Help, NoViewAsksForCommandLineFlags) {
  Harness h;
  ASSERT_TRUE(h.load(demoDir()));
  h->updateAllViews();
  for (hl::views::InstrumentView* v : h->views()) {
    EXPECT_FALSE(v->figureTitle().contains(QLatin1String("--"))) << v->figureTitle().toStdString();
    for (int i = 0; i < v->plot()->itemCount(); ++i)
      if (auto* t = qobject_cast<QCPItemText*>(v->plot()->item(i)))
        EXPECT_FALSE(t->text().contains(QLatin1String("--"))) << t->text().toStdString();
  }
}

TEST(Wording, CountsOfOneAreSingular_AndFineTunesSortNaturally) {
  EXPECT_EQ(hl::views::tokensText(1), QStringLiteral("1 token"));
  EXPECT_EQ(hl::views::tokensText(0), QStringLiteral("0 tokens"));
  EXPECT_EQ(hl::views::tokensText(12), QStringLiteral("12 tokens"));
  Harness h;
  ASSERT_TRUE(h.load(demoDir(), QStringLiteral("3")));
  ASSERT_TRUE(h.step(1));
  EXPECT_TRUE(h->statusBar()->currentMessage().startsWith(QStringLiteral("1 token ("))) << h->statusBar()->currentMessage().toStdString();
  QStringList names = {"step-60", "step-7", "step-15", "step-100", "step-007b"};
  std::sort(names.begin(), names.end(), hl::app::naturalLess);
  EXPECT_EQ(names, QStringList({"step-7", "step-007b", "step-15", "step-60", "step-100"}));
}

TEST(Wording, BackendMenu_NamesAnEmulatedDevice_AndDoesNotRememberIt) {
  EXPECT_EQ(hl::app::backendMenuLabel("cpu"), QStringLiteral("cpu"));
  if (!hl::app::backendIsEmulated("vulkan")) GTEST_SKIP() << "no CPU-emulated Vulkan device here";
  EXPECT_TRUE(hl::app::backendMenuLabel("vulkan").contains(QStringLiteral("CPU emulation")));
  Harness h;
  ASSERT_TRUE(h.load(demoDir()));
  QAction* vk = nullptr;
  for (QAction* a : h->findChildren<QAction*>())
    if (a->text().startsWith(QStringLiteral("vulkan (")) && a->text().contains(QStringLiteral("CPU emulation"))) vk = a;
  ASSERT_NE(vk, nullptr);
  vk->trigger();
  EXPECT_FALSE(QSettings().contains("engine/backend"));
}

TEST(Legends, StripUnderline_TooltipNamesBothPredictions) {
  Harness h;
  loadWithB(h);
  const hl::Run* a = h->runA();
  const hl::Run* b = h->runB();
  ASSERT_TRUE(a && b);
  int marked = 0;
  for (int t = 0; t < static_cast<int>(a->records.size()); ++t) {
    const auto& la = a->records[t].logits;
    const auto& lb = b->records[t].logits;
    const auto ia = std::max_element(la.begin(), la.end()) - la.begin();
    const auto ib = std::max_element(lb.begin(), lb.end()) - lb.begin();
    EXPECT_EQ(h->tokenStrip()->chip(t).differs, ia != ib) << "token " << t;
    const QString tip = h->tokenStrip()->chipToolTip(t);
    if (ia != ib) {
      ++marked;
      EXPECT_TRUE(tip.contains(QStringLiteral("B predicts #%1").arg(ib)) || tip.contains(QStringLiteral("(#%1)").arg(ib)))
          << tip.toStdString();
      EXPECT_TRUE(tip.contains(QStringLiteral("red underline"))) << tip.toStdString();
    } else {
      EXPECT_FALSE(tip.contains(QStringLiteral("red underline"))) << tip.toStdString();
    }
  }
  auto* legend = h->findChild<QLabel*>("stripLegend");
  ASSERT_NE(legend, nullptr);
  EXPECT_TRUE(legend->text().contains(QStringLiteral("red underline")));
  RecordProperty("tokens_marked", marked);
}
