// SHA-256 (FIPS 180-4) of byte buffers, one-shot or streamed; used to fingerprint config.json in
// traces and sessions. Not a general crypto library: no HMAC, no constant-time guarantees.
// Reference: FIPS PUB 180-4 §6.2 (test vectors: "abc", "").
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace hl {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  // Finishes the hash and returns 64 lowercase hex digits; the object must not be updated afterwards.
  std::string hex_digest();

 private:
  void block(const uint8_t* p);  // one 64-byte block
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;  // bytes hashed so far
};

std::string sha256_hex(const void* data, size_t size);

}  // namespace hl
