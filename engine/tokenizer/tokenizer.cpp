// SentencePiece tokenizer (tokenizer.h) over libsentencepiece, the choice between tokenizer.json,
// tokenizer.model and a GGUF file's vocabulary (load_tokenizer_for), plus the --ids list parser.
// The model file is untrusted input: read here with a size limit, then parsed from memory; every
// failure is a LoadError naming the file. Not BOS handling (callers prepend bos_token_id,
// trace-format.md §3). Reference: google/sentencepiece sentencepiece_processor.h.
#include "engine/tokenizer/tokenizer.h"

#include <sys/stat.h>

#include <sentencepiece_processor.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include "engine/core/error.h"
#include "engine/io/file_check.h"
#include "engine/io/gguf.h"
#include "engine/tokenizer/gguf_tokenizer.h"
#include "engine/tokenizer/hf_tokenizer.h"
#include "engine/tokenizer/sp_model_check.h"

namespace hl {
namespace {

constexpr uint64_t kMaxModelBytes = uint64_t{64} << 20;  // real SentencePiece models are < 5 MB

std::string read_model_file(const std::string& path) {
  check_regular_file(path, "tokenizer model");  // before fopen: a FIFO would block it, /dev/zero never ends
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw LoadError(path + ": cannot open tokenizer model: " + std::strerror(errno));
  struct stat st {};
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    std::fclose(f);
    throw LoadError(path + ": tokenizer model is not a regular file");
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxModelBytes) {
    std::fclose(f);
    throw LoadError(path + ": tokenizer model is " + std::to_string(st.st_size) + " bytes, allowed at most " +
                    std::to_string(kMaxModelBytes));
  }
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  const size_t got = bytes.empty() ? 0 : std::fread(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  if (got != bytes.size()) throw LoadError(path + ": tokenizer model: short read");
  if (bytes.empty()) throw LoadError(path + ": tokenizer model is empty");
  return bytes;
}

// SentencePiece marks a word start with U+2581 '▁' (bytes E2 96 81); shown as a space.
std::string replace_word_marks(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (i + 2 < s.size() && static_cast<unsigned char>(s[i]) == 0xE2 && static_cast<unsigned char>(s[i + 1]) == 0x96 &&
        static_cast<unsigned char>(s[i + 2]) == 0x81) {
      out += ' ';
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// A byte piece "<0xNN>": printable ASCII as itself, \n \t \r escaped, other bytes kept as "<0xNN>".
std::string byte_piece_text(const std::string& piece) {
  unsigned v = 0;
  if (piece.size() == 6 && std::sscanf(piece.c_str(), "<0x%2X>", &v) == 1) {
    if (v == '\n') return "\\n";
    if (v == '\t') return "\\t";
    if (v == '\r') return "\\r";
    if (v >= 0x20 && v < 0x7f) return std::string(1, static_cast<char>(v));
  }
  return piece;
}

}  // namespace

class SentencePieceTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> encode(const std::string& text) const override;
  std::string piece(int32_t id) const override;
  std::string raw_piece(int32_t id) const override;
  std::string token_bytes(int32_t id) const override;
  bool is_special(int32_t id) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override;
  std::string kind() const override { return "tokenizer.model"; }

  struct Impl {
    sentencepiece::SentencePieceProcessor sp;
    std::string path;
    int64_t size = 0;
  };
  std::unique_ptr<Impl> impl_ = std::make_unique<Impl>();
};

Tokenizer::~Tokenizer() = default;

namespace {
bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool is_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
bool ends_with(const std::string& s, const std::string& x) {
  return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
}
}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer_for(const std::string& path) {
  std::string dir = path, json, model;
  if (is_dir(path)) {
    if (is_file(path + "/tokenizer.json")) json = path + "/tokenizer.json";
    else if (is_file(path + "/tokenizer.model")) model = path + "/tokenizer.model";
    else return nullptr;
  } else if (ends_with(path, ".json")) {
    json = path;
    const size_t slash = path.find_last_of('/');
    dir = slash == std::string::npos ? "." : path.substr(0, slash);
  } else {
    check_regular_file(path, "tokenizer model");  // before is_gguf_file opens it
    if (is_gguf_file(path)) return load_gguf_tokenizer(path);  // null when it has no vocabulary
    model = path;
  }
  if (!json.empty()) {
    const std::string config = dir + "/tokenizer_config.json";
    return load_hf_tokenizer(json, is_file(config) ? config : std::string());
  }
  return Tokenizer::from_bytes(read_model_file(model), model);
}

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& path) {
  auto t = load_tokenizer_for(path);
  if (!t && !is_dir(path)) throw LoadError(path + ": tokenizer.ggml.model: is missing (the GGUF file has no vocabulary)");
  if (!t) throw LoadError(path + ": has no tokenizer.json or tokenizer.model");
  return t;
}

std::unique_ptr<Tokenizer> Tokenizer::from_bytes(const std::string& bytes, const std::string& name) {
  if (bytes.empty()) throw LoadError(name + ": tokenizer model is empty");
  if (bytes.size() > kMaxModelBytes)
    throw LoadError(name + ": tokenizer model is " + std::to_string(bytes.size()) + " bytes, allowed at most " +
                    std::to_string(kMaxModelBytes));
  check_sp_model(bytes, name);  // the library trusts piece lengths and the normaliser's trie
  auto t = std::make_unique<SentencePieceTokenizer>();
  sentencepiece::util::Status status;
  try {
    status = t->impl_->sp.LoadFromSerializedProto(bytes);
  } catch (const std::exception& e) {  // darts-clone throws while building a trie
    throw LoadError(name + ": not a SentencePiece model: " + e.what());
  }
  if (!status.ok()) throw LoadError(name + ": not a SentencePiece model: " + status.ToString());
  t->impl_->path = name;
  t->impl_->size = t->impl_->sp.GetPieceSize();
  if (t->impl_->size <= 0) throw LoadError(name + ": SentencePiece model has an empty vocabulary");
  return t;
}

std::vector<int32_t> SentencePieceTokenizer::encode(const std::string& text) const {
  std::vector<int> ids;
  const auto status = impl_->sp.Encode(text, &ids);
  if (!status.ok()) throw Error(impl_->path + ": cannot encode text: " + status.ToString());
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::string SentencePieceTokenizer::piece(int32_t id) const {
  if (id < 0 || id >= impl_->size) return "<id " + std::to_string(id) + ">";
  const std::string& p = impl_->sp.IdToPiece(id);
  if (impl_->sp.IsByte(id)) return byte_piece_text(p);
  return replace_word_marks(p);
}

// Decodes runs of in-vocabulary ids with SentencePiece; an out-of-range id appears as "<id N>".
std::string SentencePieceTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  std::vector<int> run;
  auto flush = [&]() {
    if (run.empty()) return;
    std::string text;
    const auto status = impl_->sp.Decode(run, &text);
    if (!status.ok()) throw Error(impl_->path + ": cannot decode ids: " + status.ToString());
    // SentencePiece drops the word mark of a run's first piece; keep it after a "<id N>".
    if (!out.empty()) {
      const std::string& first = impl_->sp.IdToPiece(run.front());
      if (first.rfind("\xE2\x96\x81", 0) == 0 && (text.empty() || text[0] != ' ')) text = " " + text;
    }
    out += text;
    run.clear();
  };
  for (int32_t id : ids) {
    if (id >= 0 && id < impl_->size) {
      run.push_back(id);
    } else {
      flush();
      out += "<id " + std::to_string(id) + ">";
    }
  }
  flush();
  return out;
}

int64_t SentencePieceTokenizer::vocab_size() const {
  return impl_->size;
}

std::string SentencePieceTokenizer::raw_piece(int32_t id) const {
  return id >= 0 && id < impl_->size ? impl_->sp.IdToPiece(id) : std::string();
}

std::string SentencePieceTokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= impl_->size) return std::string();
  const std::string& p = impl_->sp.IdToPiece(id);
  unsigned v = 0;
  if (impl_->sp.IsByte(id) && p.size() == 6 && std::sscanf(p.c_str(), "<0x%2X>", &v) == 1)
    return std::string(1, static_cast<char>(v));
  return replace_word_marks(p);
}

bool SentencePieceTokenizer::is_special(int32_t id) const {
  return id >= 0 && id < impl_->size && (impl_->sp.IsControl(id) || impl_->sp.IsUnknown(id));
}

std::vector<int32_t> parse_id_list(const std::string& s) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  int item = 0;
  for (;;) {
    ++item;
    const size_t comma = s.find(',', pos);
    const std::string raw = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t b = raw.find_first_not_of(" \t");
    size_t e = raw.find_last_not_of(" \t");
    const std::string tok = b == std::string::npos ? std::string() : raw.substr(b, e - b + 1);
    auto fail = [&](const std::string& why) {
      throw Error("id list: item " + std::to_string(item) + " '" + tok + "' " + why +
                  " (allowed: integers 0..2147483647 separated by commas)");
    };
    if (tok.empty()) fail(s.find_first_not_of(" \t") == std::string::npos ? "is empty (no ids given)" : "is empty");
    int64_t v = 0;
    if (tok[0] == '-') fail("is negative");
    for (char c : tok) {
      if (c < '0' || c > '9') fail("is not a non-negative integer");
      v = v * 10 + (c - '0');
      if (v > std::numeric_limits<int32_t>::max()) fail("is too large");
    }
    ids.push_back(static_cast<int32_t>(v));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return ids;
}

}  // namespace hl
