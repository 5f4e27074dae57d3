// The run label rule of sessions (session_layout.h). The field table itself is the engine's
// (engine/trace/trace_fields.cpp).
#include "sessions/session_layout.h"

namespace hl::session_layout {

bool valid_label(const std::string& label) {
  if (label.empty() || label.size() > 32 || label == "." || label == "..") return false;
  for (char c : label) {
    const bool ok =
        (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace hl::session_layout
