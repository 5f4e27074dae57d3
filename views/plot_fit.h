// Keeps a view's text readable in a small dock (issue 17 item 4, finding 5): figure-title lines and
// axis / colour-bar labels too long for their room are elided with "…" (the full text stays in a
// property and comes back when there is room), and a legend inside a panel gets headroom on the
// value axis so that it does not cover plotted points. Free functions over QCustomPlot; no view
// state, no data.
#pragma once
#include <qcustomplot.h>

namespace hl::views {

// Elides each line of `title`'s text to `width` pixels; the full text is kept across calls.
void fitTitle(QCPTextElement* title, const QString& fullText, int width);
// Elides axis labels (and colour-bar labels) longer than their axis, from the current layout.
void fitAxisLabels(QCustomPlot* plot);
// Widens the value range of panels whose top (or bottom) legend would cover graph points or bar
// tops under it, using the panels' sizes from the last layout. Axes in `skip` (zoomed by the user)
// and reversed axes are left alone.
void keepLegendsOffData(QCustomPlot* plot, const QSet<QCPAxis*>& skip);

}  // namespace hl::views
