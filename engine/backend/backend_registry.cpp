// The registry of backends (backend_registry.h) and the selection rules over it: "auto" tries the
// native backends by rank and falls back to the next when one fails while being set up; a named
// backend not in this build is an error listing those that are (trace-format.md §3).
#include "engine/backend/backend_registry.h"

#include <algorithm>

#include "engine/core/error.h"

namespace hl {

const std::vector<BackendEntry>& backend_registry() {
  // The lines the entry files added (a backend whose toolchain is optional is compiled, and so
  // registered, only in builds that have it), in menu order.
  static const std::vector<BackendEntry> table = [] {
    std::vector<BackendEntry> t = BackendTable::entries();
    std::stable_sort(t.begin(), t.end(), [](const BackendEntry& a, const BackendEntry& b) {
      return a.menu_order != b.menu_order ? a.menu_order < b.menu_order : std::string(a.name) < b.name;
    });
    return t;
  }();
  return table;
}

const BackendEntry* find_backend(const std::string& name) {
  for (const BackendEntry& e : backend_registry())
    if (name == e.name) return &e;
  return nullptr;
}

bool backend_is_emulated(const std::string& name) {
  const BackendEntry* e = find_backend(name);
  return e && e->available(false) && !e->available(true);
}

std::string backend_choices() {
  std::string s = "auto";
  for (const BackendEntry& e : backend_registry()) s += std::string(", ") + e.name;
  return s;
}

std::vector<std::string> available_backends() {
  std::vector<std::string> b;
  for (const BackendEntry& e : backend_registry())
    if (e.available(false)) b.push_back(e.name);
  return b;
}

std::unique_ptr<Backend> make_backend(const std::string& which, std::shared_ptr<const Model> model, std::string* note) {
  if (which == "auto") {
    std::vector<const BackendEntry*> order;
    for (const BackendEntry& e : backend_registry())
      if (e.available(true)) order.push_back(&e);
    std::stable_sort(order.begin(), order.end(),
                     [](const BackendEntry* a, const BackendEntry* b) { return a->auto_rank < b->auto_rank; });
    for (size_t i = 0; i < order.size(); ++i) {
      if (i + 1 == order.size()) return order[i]->make(std::move(model), true);  // the last: no fallback
      try {
        return order[i]->make(model, true);
      } catch (const BackendFailure& e) {
        if (note) *note = std::string(e.what()) + "; using the " + order[i + 1]->label + " backend";
      }
    }
    throw Error("no backend is available in this build");  // unreachable: the CPU is always there
  }
  if (const BackendEntry* e = find_backend(which)) return e->make(std::move(model), false);
  throw Error("backend '" + which + "' is not available in this build (expected " + backend_choices() + ")");
}

}  // namespace hl
