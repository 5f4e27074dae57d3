// checksum64 over libxxhash's XXH3_64bits (seed 0); hex formatting and parsing. Reference:
// Cyan4973/xxHash xxhash.h (XXH3 64-bit variant, stable since v0.8.0).
#include "engine/core/checksum.h"

#include <xxhash.h>

namespace hl {

uint64_t checksum64(const void* data, size_t size) {
  return static_cast<uint64_t>(XXH3_64bits(data, size));
}

std::string checksum_hex(uint64_t v) {
  static const char* hex = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<size_t>(i)] = hex[v & 15];
  return s;
}

bool parse_checksum_hex(const std::string& s, uint64_t* out) {
  if (s.size() != 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    if (d < 0) return false;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

}  // namespace hl
