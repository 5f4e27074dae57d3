// 64-bit checksums of byte ranges (XXH3-64 from libxxhash, Collet 2019), as 16 lowercase hex digits:
// session files store one per tensor and one of the manifest to detect damaged bytes on load.
// Not cryptographic: it detects accidents (bit flips, truncation), not forgery; sha256.h is for that.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace hl {

uint64_t checksum64(const void* data, size_t size);
std::string checksum_hex(uint64_t v);  // 16 lowercase hex digits
// 16 hex digits (either case) → value; false for anything else.
bool parse_checksum_hex(const std::string& s, uint64_t* out);

}  // namespace hl
