// The two GGUF vocabulary builders (gguf_vocab.h). "llama": a SentencePiece ModelProto written in
// the protobuf wire format (BPE model: llama.cpp encodes every llama vocabulary with score-driven
// merges, whatever the original model type; identity normalizer, since GGUF keeps no charsmap for
// it) and loaded through Tokenizer::from_bytes like a tokenizer.model. "gpt2": the tokenizer.json
// pipeline's objects (hf_internal.h) made directly: a byte-level BPE over the tokens and merges,
// the pre-tokenizer tokenizer.ggml.pre names, control and user-defined tokens as added tokens.
// Not the metadata checks (gguf_tokenizer.cpp). Reference: google/sentencepiece
// sentencepiece_model.proto (field numbers); protobuf encoding (developers.google.com/protocol-
// buffers/docs/encoding); llama.cpp src/llama-vocab.cpp (pre-tokenizer names and regexes).
#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/io/file_check.h"
#include "engine/tokenizer/gguf_vocab.h"
#include "engine/tokenizer/hf_internal.h"
#include "engine/tokenizer/hf_tables.h"

namespace hl::gguf_vocab {
namespace {

// ---- protobuf wire format ------------------------------------------------------------------
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
void put_tag(std::string& out, uint32_t field, uint32_t wire) { put_varint(out, uint64_t{field} << 3 | wire); }
void put_uint(std::string& out, uint32_t field, uint64_t v) {  // bool, enum, non-negative int32
  put_tag(out, field, 0);
  put_varint(out, v);
}
void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}
void put_float(std::string& out, uint32_t field, float f) {
  put_tag(out, field, 5);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  for (int k = 0; k < 4; ++k) out += static_cast<char>((u >> (8 * k)) & 0xff);  // little endian
}

// sentencepiece_model.proto field numbers.
enum : uint32_t {
  kModelPieces = 1, kModelTrainerSpec = 2, kModelNormalizerSpec = 3,
  kPiecePiece = 1, kPieceScore = 2, kPieceType = 3,
  kTrainerModelType = 3, kTrainerVocabSize = 4, kTrainerByteFallback = 35, kTrainerUnkId = 40,
  kNormName = 1, kNormAddDummyPrefix = 3, kNormRemoveExtraWhitespaces = 4, kNormEscapeWhitespaces = 5,
};
constexpr uint32_t kModelTypeBpe = 2;

bool is_byte_piece(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return false;
  for (size_t k = 3; k < 5; ++k)
    if (!((t[k] >= '0' && t[k] <= '9') || (t[k] >= 'A' && t[k] <= 'F'))) return false;
  return true;
}

// The piece types SentencePiece will see: exactly one UNKNOWN (the file's, else the piece of
// tokenizer.ggml.unknown_token_id), BYTE pieces of the form <0xHH>, all 256 of them or none
// (libsentencepiece's byte fallback needs every byte).
std::vector<int32_t> sentencepiece_types(const Vocab& v) {
  std::vector<int32_t> types = v.types;
  int64_t unk = -1;
  size_t bytes = 0;
  for (size_t i = 0; i < types.size(); ++i) {
    bytes += types[i] == kByte;
    if (types[i] == kUnknown) {
      if (unk >= 0)
        fail(v, "tokenizer.ggml.token_type", "tokens " + std::to_string(unk) + " and " + std::to_string(i) +
                                                 " both have type 2 (unknown) (allowed: one unknown token)");
      unk = static_cast<int64_t>(i);
    }
    if (types[i] == kByte && !is_byte_piece((*v.tokens)[i]))
      fail(v, "tokenizer.ggml.tokens[" + std::to_string(i) + "]",
           shown((*v.tokens)[i]) + " has type 6 (byte) but is not of the form <0xHH> (allowed <0x00>..<0xFF>)");
  }
  if (bytes != 0 && bytes != 256)  // the tokens are unique, so 256 byte pieces are <0x00>..<0xFF>
    fail(v, "tokenizer.ggml.token_type", std::to_string(bytes) + " tokens have type 6 (byte) (allowed: none, or all 256 of "
                                         "<0x00>..<0xFF> for byte fallback)");
  if (unk < 0) {
    if (v.info.unk < 0)
      fail(v, "tokenizer.ggml.token_type", "no token has type 2 (unknown) and tokenizer.ggml.unknown_token_id is absent "
                                           "(allowed: one unknown token, which SentencePiece needs)");
    types[static_cast<size_t>(v.info.unk)] = kUnknown;
  }
  return types;
}

// A user-defined piece whose spaces the converter wrote as ' ' ("pre-normalized" for llama.cpp's
// raw-text matching); SentencePiece matches user-defined pieces in the escaped text, where a space
// is U+2581.
std::string escape_spaces(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == ' ') out += "\xE2\x96\x81";
    else out += c;
  }
  return out;
}

// ---- gpt2 pre-tokenizers --------------------------------------------------------------------
// The regexes of the models' own tokenizer.json files (GPT-2's is ByteLevel's built-in one).
const char* const kGpt2NoTrailing = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
const char* const kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kTekken =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const std::vector<PreTokenizer>& pre_tokenizers() {
  static const std::vector<PreTokenizer> table = {
      // llama.cpp's fallback for files without a known pre-tokenizer: four regexes in cascade.
      {{"default"}, {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2NoTrailing, R"(\p{N}+)", "[0-9][0-9][0-9]"}, false, false},
      // GPT-2 and the GPT-NeoX family (MPT, OLMo), Phi-2.
      {{"gpt-2", "gpt2", "phi-2", "mpt", "olmo"}, {}, false, true},
      // Llama 3 (and the Falcon 3 / Falcon-H1 tokenizers): ignore_merges, bos added by default.
      {{"llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral"}, {kLlama3}, false, false, false, true, true},
      // The same regex without ignore_merges: DBRX's cl100k-style vocabulary, Granite 4.0(-H).
      {{"dbrx", "smaug-bpe"}, {kLlama3}, false, false},
      // Qwen2 / Qwen3: its tokenizer.json normalizes to NFC before splitting.
      {{"qwen2"}, {kQwen2}, false, false, true},
      // Mistral's tekken (Mistral Nemo; NVIDIA's 131k vocabulary).
      {{"tekken"}, {kTekken}, false, false, false, true, true},
      // StarCoder-style: digits one by one, then GPT-2's regex (Granite 3.x "refact", SmolLM).
      {{"refact", "starcoder", "smollm"}, {}, true, true},
  };
  return table;
}

nlohmann::json pre_tokenizer_json(const PreTokenizer& p) {
  nlohmann::json seq = nlohmann::json::array();
  if (p.digits) seq.push_back({{"type", "Digits"}, {"individual_digits", true}});
  for (const char* re : p.splits)
    seq.push_back({{"type", "Split"}, {"pattern", {{"Regex", re}}}, {"behavior", "Isolated"}, {"invert", false}});
  seq.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", p.gpt2_regex}});
  return {{"type", "Sequence"}, {"pretokenizers", seq}};
}

}  // namespace

const PreTokenizer* find_pre_tokenizer(const std::string& name) {
  for (const PreTokenizer& p : pre_tokenizers())
    for (const char* n : p.names)
      if (name == n) return &p;
  return nullptr;
}

std::vector<std::string> pre_tokenizer_names() {
  std::vector<std::string> names;
  for (const PreTokenizer& p : pre_tokenizers())
    for (const char* n : p.names) names.emplace_back(n);
  std::sort(names.begin(), names.end());
  return names;
}

std::string llama_proto(const Vocab& v) {
  const std::vector<int32_t> types = sentencepiece_types(v);
  bool has_bytes = false;
  std::string out, msg;
  out.reserve(v.tokens->size() * 16);
  for (size_t i = 0; i < v.tokens->size(); ++i) {
    const std::string& t = (*v.tokens)[i];
    msg.clear();
    put_bytes(msg, kPiecePiece, types[i] == kUserDefined ? escape_spaces(t) : t);
    put_float(msg, kPieceScore, v.scores[i]);
    put_uint(msg, kPieceType, static_cast<uint32_t>(types[i]));
    put_bytes(out, kModelPieces, msg);
    has_bytes = has_bytes || types[i] == kByte;
  }
  msg.clear();
  put_uint(msg, kTrainerModelType, kModelTypeBpe);
  put_uint(msg, kTrainerVocabSize, v.tokens->size());
  put_uint(msg, kTrainerByteFallback, has_bytes ? 1 : 0);
  for (size_t i = 0; i < types.size(); ++i)
    if (types[i] == kUnknown) put_uint(msg, kTrainerUnkId, i);
  put_bytes(out, kModelTrainerSpec, msg);
  msg.clear();
  put_bytes(msg, kNormName, "identity");
  put_uint(msg, kNormAddDummyPrefix, v.info.add_space_prefix ? 1 : 0);
  put_uint(msg, kNormRemoveExtraWhitespaces, v.info.remove_extra_whitespaces ? 1 : 0);
  put_uint(msg, kNormEscapeWhitespaces, 1);
  put_bytes(out, kModelNormalizerSpec, msg);
  return out;
}

std::unique_ptr<Tokenizer> build_llama(const Vocab& v) {
  return Tokenizer::from_bytes(llama_proto(v), v.name);
}

std::unique_ptr<Tokenizer> build_gpt2(const Vocab& v) {
  const PreTokenizer* pre = find_pre_tokenizer(v.info.pre);
  if (!pre) fail(v, "tokenizer.ggml.pre", shown(v.info.pre) + " is not a known pre-tokenizer");
  const hf::Where w{v.name, "tokenizer.ggml"};
  hf::RawModelParts raw;
  raw.vocab_taken = true;
  raw.vocab.reserve(v.tokens->size());
  for (size_t i = 0; i < v.tokens->size(); ++i) raw.vocab.emplace_back((*v.tokens)[i], static_cast<int64_t>(i));
  raw.merges_taken = true;
  for (const std::string& m : *v.merges) {  // checked: "a b" with both parts tokens
    const size_t sp = m.find(' ', 1);
    raw.add_merge(std::string_view(m).substr(0, sp), std::string_view(m).substr(sp + 1));
  }
  auto t = std::make_unique<hf::HfTokenizer>();
  t->name = v.name;
  t->model = hf::make_bpe({{"type", "BPE"}, {"ignore_merges", v.info.ignore_merges}}, w, raw);
  if (pre->nfc) t->normalizer = hf::make_normalizer({{"type", "NFC"}}, w.at("pre"));
  t->pre_tokenizer = hf::make_pre_tokenizer(pre_tokenizer_json(*pre), w.at("pre"));
  t->decoder = hf::make_decoder({{"type", "ByteLevel"}}, w);
  t->byte_level_pieces = true;
  // Control, unknown and user-defined tokens are matched in the raw text before anything else,
  // as a tokenizer.json's added tokens are (the converter wrote them from those).
  for (size_t i = 0; i < v.types.size(); ++i) {
    const int32_t ty = v.types[i];
    if (ty != kControl && ty != kUnknown && ty != kUserDefined) continue;
    hf::AddedToken a;
    a.content = (*v.tokens)[i];
    a.id = static_cast<int32_t>(i);
    a.special = ty != kUserDefined;
    a.normalized = false;
    t->added.push_back(std::move(a));
  }
  t->finish();
  return t;
}

}  // namespace hl::gguf_vocab
