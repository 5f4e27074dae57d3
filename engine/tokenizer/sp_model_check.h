// Validation of a SentencePiece model file (tokenizer.model, a serialized ModelProto) before it is
// handed to libsentencepiece, which trusts what it loads: a piece of ~200 KB overflows the stack
// while the library builds its trie, and a malformed normalizer precompiled_charsmap is read out of
// bounds on the first encode. Not the parse itself (libsentencepiece does that after this passes).
// Reference: google/sentencepiece sentencepiece_model.proto, normalizer.cc; darts-clone darts.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace hl {

constexpr size_t kMaxSpPieceBytes = 16 << 10;      // real pieces are under 100 bytes
constexpr size_t kMaxSpPieces = 4 << 20;           // real vocabularies are under 300k pieces
constexpr size_t kMaxSpCharsmapBytes = 8 << 20;    // the NFKC map is 240 KB

// Walks the protobuf wire format of `bytes` with bounds checks and checks every field the library
// relies on: pieces (count; each present, 1..kMaxSpPieceBytes bytes, UTF-8 without NUL), scores
// (finite), piece types, trainer_spec.model_type, and each normalizer's precompiled_charsmap (the
// double-array trie reads stay inside the trie, every leaf points at a NUL-terminated UTF-8 string
// inside the normalized blob). Throws LoadError "NAME: ..." naming the object and the allowed range.
void check_sp_model(const std::string& bytes, const std::string& name);

// The precompiled_charsmap part alone (`what` names it in messages, e.g. "normalizer_spec").
void check_sp_charsmap(const std::string& blob, const std::string& name, const std::string& what);

}  // namespace hl
