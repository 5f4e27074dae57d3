// The normalizers of tokenizer.json (hf_internal.h): NFC/NFD/NFKC/NFKD (ICU), Lowercase, Strip,
// StripAccents, Replace, Prepend, BertNormalizer, Sequence and Precompiled (a SentencePiece
// normalization charsmap: a Darts double-array trie over UTF-8 keys plus a string blob, read with a
// bounds check on every step). Not pre-tokenization. Reference: huggingface.co/docs/tokenizers
// "Normalizers"; Yata et al. 2007 (Darts double arrays); Kudo & Richardson 2018 (SentencePiece).
#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/tokenizer/hf_internal.h"

namespace hl::hf {
namespace {

class UnicodeNorm : public Normalizer {
 public:
  explicit UnicodeNorm(NormForm f) : f_(f) {}
  void normalize(std::string& s) const override { s = unicode_normalize(s, f_); }

 private:
  NormForm f_;
};

class Lowercase : public Normalizer {
 public:
  void normalize(std::string& s) const override {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) append_lower(out, next_cp(s, i));
    s.swap(out);
  }
};

class Strip : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& s) const override {
    size_t a = 0, b = s.size();
    if (left_) {
      while (a < b) {
        size_t j = a;
        if (!is_whitespace(next_cp(s, j))) break;
        a = j;
      }
    }
    if (right_) {
      while (b > a) {
        size_t k = b - 1;
        while (k > a && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
        size_t j = k;
        if (!is_whitespace(next_cp(s, j))) break;
        b = k;
      }
    }
    s = s.substr(a, b - a);
  }

 private:
  bool left_, right_;
};

// NFD then drop nonspacing marks (the StripAccents normalizer expects NFD input itself; BERT's
// strip_accents runs NFD first).
void strip_accents(std::string& s, bool nfd_first) {
  if (nfd_first) s = unicode_normalize(s, NormForm::NFD);
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const char32_t c = next_cp(s, i);
    if (!is_mark_nonspacing(c)) append_utf8(out, c);
  }
  s.swap(out);
}

class StripAccents : public Normalizer {
 public:
  void normalize(std::string& s) const override { strip_accents(s, false); }
};

class Replace : public Normalizer {
 public:
  Replace(Pattern p, std::string content) : p_(std::move(p)), content_(std::move(content)) {}
  void normalize(std::string& s) const override {
    const auto m = p_.find_all(s);
    if (m.empty()) return;
    std::string out;
    out.reserve(s.size());
    size_t prev = 0;
    for (const auto& [a, b] : m) {
      out.append(s, prev, a - prev);
      out += content_;
      prev = b;
    }
    out.append(s, prev, std::string::npos);
    s.swap(out);
  }

 private:
  Pattern p_;
  std::string content_;
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string p) : p_(std::move(p)) {}
  void normalize(std::string& s) const override {
    if (!s.empty()) s.insert(0, p_);
  }

 private:
  std::string p_;
};

class Bert : public Normalizer {
 public:
  Bert(bool clean, bool chinese, bool strip, bool lower) : clean_(clean), chinese_(chinese), strip_(strip), lower_(lower) {}
  void normalize(std::string& s) const override {
    std::string out;
    out.reserve(s.size() + 8);
    for (size_t i = 0; i < s.size();) {
      char32_t c = next_cp(s, i);
      if (clean_) {
        // control characters go first (\v and \f too), then whitespace becomes ' '
        const bool keep_ctl = c == '\t' || c == '\n' || c == '\r';
        if (c == 0 || c == 0xFFFD || (!keep_ctl && is_other(c))) continue;
        if (keep_ctl || is_whitespace(c)) c = ' ';
      }
      if (chinese_ && is_cjk(c)) {
        out += ' ';
        append_utf8(out, c);
        out += ' ';
      } else {
        append_utf8(out, c);
      }
    }
    if (strip_) strip_accents(out, true);
    if (lower_) Lowercase().normalize(out);
    s.swap(out);
  }

 private:
  bool clean_, chinese_, strip_, lower_;
};

class Sequence : public Normalizer {
 public:
  std::vector<std::unique_ptr<Normalizer>> items;
  void normalize(std::string& s) const override {
    for (const auto& n : items) n->normalize(s);
  }
};

// SentencePiece's precompiled charsmap: u32 trie size (bytes), the trie (u32 units), then the
// replacement strings, each ending with a NUL.
class Precompiled : public Normalizer {
 public:
  Precompiled(const std::string& blob, const Where& w) {
    if (blob.size() < 4) fail(w, "charsmap is " + std::to_string(blob.size()) + " bytes (at least 4 needed)");
    const uint32_t trie_bytes = static_cast<uint32_t>(static_cast<unsigned char>(blob[0])) |
                                static_cast<uint32_t>(static_cast<unsigned char>(blob[1])) << 8 |
                                static_cast<uint32_t>(static_cast<unsigned char>(blob[2])) << 16 |
                                static_cast<uint32_t>(static_cast<unsigned char>(blob[3])) << 24;
    if (trie_bytes % 4 != 0 || trie_bytes == 0 || trie_bytes > blob.size() - 4)
      fail(w, "charsmap trie size " + std::to_string(trie_bytes) + " is not a multiple of 4 in [4, " +
                  std::to_string(blob.size() - 4) + "]");
    units_.resize(trie_bytes / 4);
    for (size_t k = 0; k < units_.size(); ++k) {
      const size_t o = 4 + 4 * k;
      units_[k] = static_cast<uint32_t>(static_cast<unsigned char>(blob[o])) |
                  static_cast<uint32_t>(static_cast<unsigned char>(blob[o + 1])) << 8 |
                  static_cast<uint32_t>(static_cast<unsigned char>(blob[o + 2])) << 16 |
                  static_cast<uint32_t>(static_cast<unsigned char>(blob[o + 3])) << 24;
    }
    normalized_ = blob.substr(4 + trie_bytes);
    if (!is_valid_utf8(normalized_)) fail(w, "charsmap replacement strings are not valid UTF-8");
  }

  void normalize(std::string& s) const override {
    bool plain = true;  // a charsmap may map ASCII too, so no fast path beyond "nothing matched"
    std::string out;
    out.reserve(s.size());
    const std::vector<size_t> g = grapheme_bounds(s);
    for (size_t k = 0; k + 1 < g.size(); ++k) {
      const std::string_view gr(s.data() + g[k], g[k + 1] - g[k]);
      if (gr.size() < 6) {
        if (const std::string_view* r = transform(gr)) {
          out.append(*r);
          plain = false;
          continue;
        }
      }
      for (size_t i = 0; i < gr.size();) {
        const size_t n = cp_len_at(gr, i);
        const std::string_view part = gr.substr(i, n);
        if (const std::string_view* r = transform(part)) {
          out.append(*r);
          plain = false;
        } else {
          out.append(part);
        }
        i += n;
      }
    }
    if (!plain) s.swap(out);
  }

 private:
  // The replacement of the shortest key that prefixes `chunk`, or null.
  const std::string_view* transform(std::string_view chunk) const {
    size_t pos = 0;
    uint32_t unit = units_[0];
    pos ^= offset(unit);
    for (unsigned char c : chunk) {
      if (c == 0) break;
      pos ^= c;
      if (pos >= units_.size()) return nullptr;
      unit = units_[pos];
      if ((unit & ((1u << 31) | 0xFFu)) != c) return nullptr;
      pos ^= offset(unit);
      if (pos >= units_.size()) return nullptr;
      if ((unit >> 8) & 1u) {
        const uint32_t v = units_[pos] & ((1u << 31) - 1);
        if (v >= normalized_.size()) return nullptr;
        size_t end = normalized_.find('\0', v);
        if (end == std::string::npos) end = normalized_.size();
        thread_local std::string_view result;
        result = std::string_view(normalized_).substr(v, end - v);
        return &result;
      }
    }
    return nullptr;
  }
  static size_t offset(uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); }

  std::vector<uint32_t> units_;
  std::string normalized_;
};

std::string base64_decode(const std::string& in, const Where& w) {
  std::string out;
  out.reserve(in.size() / 4 * 3);
  uint32_t acc = 0;
  int bits = 0;
  for (char ch : in) {
    int v;
    if (ch >= 'A' && ch <= 'Z') v = ch - 'A';
    else if (ch >= 'a' && ch <= 'z') v = ch - 'a' + 26;
    else if (ch >= '0' && ch <= '9') v = ch - '0' + 52;
    else if (ch == '+') v = 62;
    else if (ch == '/') v = 63;
    else if (ch == '=') break;
    else fail(w, "precompiled_charsmap is not base64");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  return out;
}

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const Where& w, int depth) {
  if (j.is_null()) return nullptr;
  if (!j.is_object()) fail(w, "is not an object");
  if (depth > kMaxDepth) fail(w, "normalizers nested deeper than " + std::to_string(kMaxDepth));
  const std::string type = get_string(j, "type", w);
  if (type == "NFC") return std::make_unique<UnicodeNorm>(NormForm::NFC);
  if (type == "NFD") return std::make_unique<UnicodeNorm>(NormForm::NFD);
  if (type == "NFKC") return std::make_unique<UnicodeNorm>(NormForm::NFKC);
  if (type == "NFKD") return std::make_unique<UnicodeNorm>(NormForm::NFKD);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "Strip") return std::make_unique<Strip>(opt_bool(j, "strip_left", true, w), opt_bool(j, "strip_right", true, w));
  if (type == "Prepend") return std::make_unique<Prepend>(get_string(j, "prepend", w));
  if (type == "Replace") {
    const nlohmann::json* p = field(j, "pattern");
    if (!p) fail(w.at("pattern"), "is missing");
    return std::make_unique<Replace>(read_pattern(*p, w.at("pattern")), get_string(j, "content", w));
  }
  if (type == "BertNormalizer") {
    const bool lower = opt_bool(j, "lowercase", true, w);
    const nlohmann::json* sa = field(j, "strip_accents");
    bool strip = lower;
    if (sa) {
      if (!sa->is_boolean()) fail(w.at("strip_accents"), "is not a boolean or null");
      strip = sa->get<bool>();
    }
    return std::make_unique<Bert>(opt_bool(j, "clean_text", true, w), opt_bool(j, "handle_chinese_chars", true, w),
                                  strip, lower);
  }
  if (type == "Precompiled") {
    const nlohmann::json* m = field(j, "precompiled_charsmap");
    if (!m) return nullptr;  // an empty charsmap normalizes nothing
    if (!m->is_string()) fail(w.at("precompiled_charsmap"), "is not a base64 string");
    const std::string& b64 = m->get_ref<const std::string&>();
    if (b64.size() > (size_t{16} << 20)) fail(w.at("precompiled_charsmap"), "is larger than 16 MiB");
    if (b64.empty()) return nullptr;
    return std::make_unique<Precompiled>(base64_decode(b64, w.at("precompiled_charsmap")), w.at("precompiled_charsmap"));
  }
  if (type == "Sequence") {
    const nlohmann::json* items = field(j, "normalizers");
    if (!items || !items->is_array()) fail(w.at("normalizers"), "is not an array");
    if (items->size() > 64) fail(w.at("normalizers"), "has " + std::to_string(items->size()) + " items (allowed at most 64)");
    auto seq = std::make_unique<Sequence>();
    for (size_t k = 0; k < items->size(); ++k)
      if (auto n = make_normalizer((*items)[k], w.at("normalizers").at(k), depth + 1)) seq->items.push_back(std::move(n));
    return seq;
  }
  fail(w.at("type"), "'" + type + "' is not a supported normalizer (NFC, NFD, NFKC, NFKD, Lowercase, Strip, "
                     "StripAccents, Replace, Prepend, BertNormalizer, Precompiled, Sequence)");
}

}  // namespace hl::hf
