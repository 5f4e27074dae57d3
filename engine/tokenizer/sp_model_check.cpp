// SentencePiece model validation (sp_model_check.h): a bounds-checked walk of the ModelProto wire
// format, and a simulation of every read libsentencepiece's normalizer makes in the
// precompiled_charsmap's darts-clone double array, for every input byte from every reachable node.
// Not a protobuf parser for use: only what is needed to refuse what the library would misread.
// Reference: protobuf encoding (developers.google.com/protocol-buffers/docs/encoding);
// sentencepiece normalizer.cc (DecodePrecompiledCharsMap, NormalizePrefix); darts-clone darts.h.
#include "engine/tokenizer/sp_model_check.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "engine/core/error.h"
#include "engine/io/json_util.h"

namespace hl {
namespace {

enum WireType : uint32_t { kVarint = 0, kI64 = 1, kLen = 2, kI32 = 5 };

struct Field {
  uint32_t number = 0;
  uint32_t wire = 0;
  uint64_t varint = 0;      // kVarint
  uint32_t i32 = 0;         // kI32
  const char* data = nullptr;  // kLen
  size_t size = 0;             // kLen
};

// A cursor over one message's bytes; every read is bounds-checked.
class Reader {
 public:
  Reader(const char* p, size_t n, const std::string& name, const std::string& what)
      : p_(p), n_(n), name_(name), what_(what) {}

  bool done() const { return pos_ >= n_; }

  Field next() {
    Field f;
    const size_t at = pos_;
    const uint64_t tag = varint();
    f.number = static_cast<uint32_t>(tag >> 3);
    f.wire = static_cast<uint32_t>(tag & 7);
    if (f.number == 0 || (tag >> 3) > 536870911u)
      fail("field number " + std::to_string(tag >> 3) + " at byte " + std::to_string(at) + " (allowed 1..536870911)");
    switch (f.wire) {
      case kVarint: f.varint = varint(); break;
      case kI64: need(8, f); pos_ += 8; break;
      case kI32:
        need(4, f);
        std::memcpy(&f.i32, p_ + pos_, 4);
        pos_ += 4;
        break;
      case kLen: {
        const uint64_t len = varint();
        if (len > n_ - pos_)
          fail("field " + std::to_string(f.number) + " says " + std::to_string(len) + " bytes, only " +
               std::to_string(n_ - pos_) + " remain");
        f.data = p_ + pos_;
        f.size = static_cast<size_t>(len);
        pos_ += f.size;
        break;
      }
      default:
        fail("field " + std::to_string(f.number) + " has wire type " + std::to_string(f.wire) +
             " (allowed: 0 varint, 1 fixed64, 2 bytes, 5 fixed32)");
    }
    return f;
  }

  [[noreturn]] void fail(const std::string& why) const {
    throw LoadError(name_ + ": SentencePiece model: " + what_ + ": " + why);
  }

  void expect(const Field& f, uint32_t wire, const char* field) const {
    if (f.wire != wire)
      fail(std::string(field) + " (field " + std::to_string(f.number) + ") has wire type " + std::to_string(f.wire) +
           ", expected " + std::to_string(wire));
  }

 private:
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= n_) fail("truncated varint at byte " + std::to_string(pos_));
      const uint8_t b = static_cast<uint8_t>(p_[pos_++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("varint longer than 10 bytes at byte " + std::to_string(pos_));
  }
  void need(size_t k, const Field& f) const {
    if (k > n_ - pos_) fail("field " + std::to_string(f.number) + " is truncated");
  }

  const char* p_;
  size_t n_;
  size_t pos_ = 0;
  const std::string& name_;
  std::string what_;
};

// Walks a message whose fields are only checked for well-formed framing (nested messages unknown).
void skim(const char* p, size_t n, const std::string& name, const std::string& what) {
  Reader r(p, n, name, what);
  while (!r.done()) (void)r.next();
}

void check_piece(const Field& msg, size_t index, const std::string& name) {
  const std::string what = "piece " + std::to_string(index);
  Reader r(msg.data, msg.size, name, what);
  bool has_piece = false;
  while (!r.done()) {
    const Field f = r.next();
    if (f.number == 1) {
      r.expect(f, kLen, "piece");
      if (f.size == 0) r.fail("the piece text is empty (allowed 1.." + std::to_string(kMaxSpPieceBytes) + " bytes)");
      if (f.size > kMaxSpPieceBytes)
        r.fail("the piece text is " + std::to_string(f.size) + " bytes, allowed at most " + std::to_string(kMaxSpPieceBytes));
      if (std::memchr(f.data, 0, f.size)) r.fail("the piece text contains a NUL byte");
      const size_t bad = find_invalid_utf8(f.data, f.size);
      if (bad != SIZE_MAX) r.fail("the piece text is not UTF-8 (byte " + std::to_string(bad) + ")");
      has_piece = true;
    } else if (f.number == 2) {
      r.expect(f, kI32, "score");
      float score;
      std::memcpy(&score, &f.i32, 4);
      if (!std::isfinite(score)) r.fail("the score is not a finite number");
    } else if (f.number == 3) {
      r.expect(f, kVarint, "type");
      if (f.varint < 1 || f.varint > 6) r.fail("type " + std::to_string(f.varint) + " (allowed 1..6)");
    }
  }
  if (!has_piece) r.fail("has no piece text");
}

void check_trainer_spec(const Field& msg, const std::string& name) {
  Reader r(msg.data, msg.size, name, "trainer_spec");
  while (!r.done()) {
    const Field f = r.next();
    if (f.number == 3) {
      r.expect(f, kVarint, "model_type");
      if (f.varint < 1 || f.varint > 4) r.fail("model_type " + std::to_string(f.varint) + " (allowed 1 unigram, 2 bpe, 3 word, 4 char)");
    }
  }
}

void check_normalizer_spec(const Field& msg, const std::string& name, const std::string& what) {
  Reader r(msg.data, msg.size, name, what);
  while (!r.done()) {
    const Field f = r.next();
    if (f.number == 2) {
      r.expect(f, kLen, "precompiled_charsmap");
      if (f.size > 0) check_sp_charsmap(std::string(f.data, f.size), name, what);
    }
  }
}

// darts-clone's DoubleArrayUnit fields.
bool unit_has_leaf(uint32_t u) { return (u >> 8) & 1; }
uint32_t unit_value(uint32_t u) { return u & ((1u << 31) - 1); }
uint32_t unit_label(uint32_t u) { return u & ((1u << 31) | 0xFF); }
size_t unit_offset(uint32_t u) { return static_cast<size_t>(u >> 10) << ((u & (1u << 9)) >> 6); }

}  // namespace

void check_sp_charsmap(const std::string& blob, const std::string& name, const std::string& what_in) {
  const std::string what = what_in + ".precompiled_charsmap";
  auto fail = [&](const std::string& why) {
    throw LoadError(name + ": SentencePiece model: " + what + ": " + why);
  };
  if (blob.size() > kMaxSpCharsmapBytes)
    fail(std::to_string(blob.size()) + " bytes, allowed at most " + std::to_string(kMaxSpCharsmapBytes));
  if (blob.size() <= 4) fail(std::to_string(blob.size()) + " bytes, too short for its 4-byte trie size");
  uint32_t trie_bytes = 0;
  std::memcpy(&trie_bytes, blob.data(), 4);  // little endian, as the library reads it on x86/ARM
  const size_t rest = blob.size() - 4;
  if (trie_bytes == 0 || trie_bytes % 4 != 0 || trie_bytes >= rest)
    fail("trie size " + std::to_string(trie_bytes) + " (allowed: a positive multiple of 4 below the " +
         std::to_string(rest) + " bytes after it, leaving room for the normalized strings)");
  const size_t units = trie_bytes / 4;
  std::vector<uint32_t> a(units);
  std::memcpy(a.data(), blob.data() + 4, trie_bytes);
  const char* norm = blob.data() + 4 + trie_bytes;
  const size_t norm_size = rest - trie_bytes;

  // Positions of the normalized blob where a NUL-terminated UTF-8 string may start: every character
  // start of a NUL-terminated segment that is valid UTF-8.
  std::vector<bool> start_ok(norm_size, false);
  for (size_t seg = 0; seg < norm_size;) {
    const void* nul = std::memchr(norm + seg, 0, norm_size - seg);
    if (!nul) break;  // a tail without NUL: no string may start there
    const size_t end = static_cast<size_t>(static_cast<const char*>(nul) - norm);
    if (find_invalid_utf8(norm + seg, end - seg) == SIZE_MAX) {
      for (size_t k = seg; k <= end; ++k)
        if ((static_cast<unsigned char>(norm[k]) & 0xC0) != 0x80) start_ok[k] = true;
    }
    seg = end + 1;
  }

  // Every node the library can reach reads units base^c for all 256 bytes c (base = pos ^ offset):
  // that block must be inside the array; a matching child with a leaf reads its value at its base.
  std::vector<bool> seen(units, false);
  std::vector<size_t> todo{0};
  seen[0] = true;
  while (!todo.empty()) {
    const size_t pos = todo.back();
    todo.pop_back();
    const size_t base = pos ^ unit_offset(a[pos]);
    if ((base | 0xFF) >= units)
      fail("the trie node at unit " + std::to_string(pos) + " points at units " + std::to_string(base & ~size_t{0xFF}) +
           ".." + std::to_string(base | 0xFF) + ", outside the " + std::to_string(units) + " units");
    for (uint32_t c = 0; c < 256; ++c) {
      const size_t child = base ^ c;
      const uint32_t u = a[child];
      if (unit_label(u) != c) continue;
      const size_t child_base = child ^ unit_offset(u);
      if (unit_has_leaf(u)) {
        if (child_base >= units)
          fail("the leaf of unit " + std::to_string(child) + " is at unit " + std::to_string(child_base) +
               ", outside the " + std::to_string(units) + " units");
        const uint32_t v = unit_value(a[child_base]);
        if (v >= norm_size || !start_ok[v])
          fail("the leaf of unit " + std::to_string(child) + " points at byte " + std::to_string(v) +
               " of the " + std::to_string(norm_size) + "-byte normalized strings, which starts no NUL-terminated UTF-8 string");
      }
      if (!seen[child]) {
        seen[child] = true;
        todo.push_back(child);
      }
    }
  }
}

void check_sp_model(const std::string& bytes, const std::string& name) {
  Reader r(bytes.data(), bytes.size(), name, "ModelProto");
  size_t pieces = 0;
  while (!r.done()) {
    const Field f = r.next();
    switch (f.number) {
      case 1:
        r.expect(f, kLen, "pieces");
        if (pieces >= kMaxSpPieces) r.fail("more than " + std::to_string(kMaxSpPieces) + " pieces");
        check_piece(f, pieces++, name);
        break;
      case 2: r.expect(f, kLen, "trainer_spec"); check_trainer_spec(f, name); break;
      case 3: r.expect(f, kLen, "normalizer_spec"); check_normalizer_spec(f, name, "normalizer_spec"); break;
      case 4: r.expect(f, kLen, "self_test_data"); skim(f.data, f.size, name, "self_test_data"); break;
      case 5: r.expect(f, kLen, "denormalizer_spec"); check_normalizer_spec(f, name, "denormalizer_spec"); break;
      default: break;
    }
  }
  if (pieces == 0) r.fail("no pieces (allowed 1.." + std::to_string(kMaxSpPieces) + ")");
}

}  // namespace hl
