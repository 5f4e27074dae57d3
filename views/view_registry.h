// The registry of instrument views: every view's id and a factory, in the order the app docks them
// and `hybridlens export` writes them. Reference: issue 5 items 3 and 5.
#pragma once
#include <QString>
#include <QStringList>
#include <QWidget>

#include "views/instrument_view.h"

namespace hl::views {

// Ids of every view: ribbon, entropy, attention, rank1, ssm_delta, router, memory, dora, outliers,
// latency, candidates.
QStringList viewIds();
// A new view by id (owned by `parent`), or null for an unknown id.
InstrumentView* createView(const QString& id, QWidget* parent = nullptr);
// One of each, in viewIds() order.
std::vector<InstrumentView*> createAllViews(QWidget* parent = nullptr);

}  // namespace hl::views
