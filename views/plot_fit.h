// Keeps a view's text readable in a small dock (issue 17 item 4, finding 5): figure-title lines and
// axis / colour-bar labels too long for their room are elided with "…" (the full text stays in a
// property and comes back when there is room). Legends: PanelLayout. Free functions over
// QCustomPlot; no view state, no data.
#pragma once
#include <qcustomplot.h>

namespace hl::views {

// Elides each line of `title`'s text to `width` pixels; the full text is kept across calls.
void fitTitle(QCPTextElement* title, const QString& fullText, int width);
// Elides axis labels (and colour-bar labels) longer than their axis, from the current layout.
void fitAxisLabels(QCustomPlot* plot);

// Labels on a panel (QCPItemText clipped to their axis rect) that would run past its edge: turned
// to the side of their point with more room, else elided with "…"; the full text comes back when
// there is room. From the current layout and ranges.
void fitItemTexts(QCustomPlot* plot);

}  // namespace hl::views
