// The view registry (see view_registry.h): ids in dock order and their factories.
#include "views/view_registry.h"

#include <functional>
#include <utility>
#include <vector>

#include "views/instrument_views.h"

namespace hl::views {

namespace {
using Factory = std::function<InstrumentView*(QWidget*)>;
const std::vector<std::pair<QString, Factory>>& table() {
  static const std::vector<std::pair<QString, Factory>> t = {
      {"ribbon", [](QWidget* p) { return new LayerRibbonView(p); }},
      {"entropy", [](QWidget* p) { return new EntropyView(p); }},
      {"attention", [](QWidget* p) { return new AttentionPatternView(p); }},
      {"rank1", [](QWidget* p) { return new Rank1View(p); }},
      {"ssm_delta", [](QWidget* p) { return new SsmDeltaView(p); }},
      {"router", [](QWidget* p) { return new RouterView(p); }},
      {"memory", [](QWidget* p) { return new MemoryView(p); }},
      {"dora", [](QWidget* p) { return new DoraView(p); }},
      {"outliers", [](QWidget* p) { return new OutliersView(p); }},
      {"latency", [](QWidget* p) { return new LatencyView(p); }},
      {"candidates", [](QWidget* p) { return new CandidatesView(p); }},
  };
  return t;
}
}  // namespace

QStringList viewIds() {
  QStringList ids;
  for (const auto& e : table()) ids << e.first;
  return ids;
}

InstrumentView* createView(const QString& id, QWidget* parent) {
  for (const auto& e : table())
    if (e.first == id) return e.second(parent);
  return nullptr;
}

std::vector<InstrumentView*> createAllViews(QWidget* parent) {
  std::vector<InstrumentView*> v;
  for (const auto& e : table()) v.push_back(e.second(parent));
  return v;
}

}  // namespace hl::views
