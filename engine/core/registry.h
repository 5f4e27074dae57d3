// Self-registration (issue 14 items 2 and 5): a kind's or a backend's own file adds its entry to a
// table at start-up, so adding one adds files and edits no table. One Registry per table, told
// apart by its Tag. Entries arrive in link order: a reader that cares about order sorts them. The
// engine library is linked whole (engine/CMakeLists.txt) so that no registering object is dropped.
#pragma once
#include <utility>
#include <vector>

namespace hl {

template <class Entry, class Tag>
class Registry {
 public:
  // Every entry registered so far (all of them, once main() runs).
  static const std::vector<Entry>& entries() { return table(); }
  // Adds `e` when constructed: `static const Registry<E, T>::Add reg{E{...}};` at namespace scope.
  struct Add {
    explicit Add(Entry e) { table().push_back(std::move(e)); }
  };

 private:
  static std::vector<Entry>& table() {
    static std::vector<Entry> t;  // a function-local static: safe whatever the order of start-up
    return t;
  }
};

}  // namespace hl
