// UTF-8 and Unicode helpers of the tokenizer.json pipeline (hf_internal.h): code points, character
// classes and case mapping through ICU, normalization forms, grapheme clusters, GPT-2's byte map,
// and the PCRE2 regex wrapper (UTF + UCP, JIT, match limits). Not tokenization itself.
// References: Unicode Standard Annex #15 (normalization) and #29 (grapheme clusters); PCRE2 docs.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/brkiter.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>

#include <algorithm>
#include <array>
#include <mutex>

#include "engine/core/error.h"
#include "engine/tokenizer/hf_internal.h"

namespace hl::hf {

char32_t next_cp(std::string_view s, size_t& i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned c = b(i);
  if (c < 0x80) {
    ++i;
    return c;
  }
  const int n = (c >= 0xC2 && c <= 0xDF) ? 1 : (c >= 0xE0 && c <= 0xEF) ? 2 : (c >= 0xF0 && c <= 0xF4) ? 3 : 0;
  if (n == 0 || i + static_cast<size_t>(n) >= s.size()) {
    ++i;
    return 0xFFFD;
  }
  char32_t v = c & (0x3F >> n);
  for (int k = 1; k <= n; ++k) {
    const unsigned t = b(i + k);
    if ((t & 0xC0) != 0x80) {
      ++i;
      return 0xFFFD;
    }
    v = (v << 6) | (t & 0x3F);
  }
  // overlong / surrogate / out of range
  if ((n == 2 && v < 0x800) || (n == 3 && (v < 0x10000 || v > 0x10FFFF)) || (v >= 0xD800 && v <= 0xDFFF)) {
    ++i;
    return 0xFFFD;
  }
  i += n + 1;
  return v;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

size_t cp_len_at(std::string_view s, size_t i) {
  size_t j = i;
  next_cp(s, j);
  return j - i;
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t at = i;
    const char32_t c = next_cp(s, i);
    if (c == 0xFFFD && !(i - at == 3 && static_cast<unsigned char>(s[at]) == 0xEF)) return false;
  }
  return true;
}

// Rust's String::from_utf8_lossy: each maximal prefix of a valid sequence that fails becomes one
// U+FFFD (Unicode "substitution of maximal subparts").
std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const unsigned c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    int n = 0;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) n = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    }
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    size_t k = 1;
    bool ok = true;
    for (; k <= static_cast<size_t>(n); ++k) {
      if (i + k >= s.size()) {
        ok = false;
        break;
      }
      const unsigned t = static_cast<unsigned char>(s[i + k]);
      const unsigned l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
      if (t < l || t > h) {
        ok = false;
        break;
      }
    }
    if (ok) {
      out.append(s.substr(i, n + 1));
      i += n + 1;
    } else {
      out += "\xEF\xBF\xBD";
      i += k;
    }
  }
  return out;
}

bool is_whitespace(char32_t c) {
  return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_WHITE_SPACE);
}
bool is_numeric(char32_t c) {
  const int8_t t = u_charType(static_cast<UChar32>(c));
  return t == U_DECIMAL_DIGIT_NUMBER || t == U_LETTER_NUMBER || t == U_OTHER_NUMBER;
}
bool is_alphanumeric(char32_t c) {
  return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_ALPHABETIC) || is_numeric(c);
}
bool is_word_char(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  const int8_t t = u_charType(static_cast<UChar32>(c));
  return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_ALPHABETIC) || t == U_NON_SPACING_MARK ||
         t == U_ENCLOSING_MARK || t == U_COMBINING_SPACING_MARK || t == U_DECIMAL_DIGIT_NUMBER ||
         t == U_CONNECTOR_PUNCTUATION || u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_JOIN_CONTROL);
}
bool is_punctuation(char32_t c) {
  if (c < 0x80) return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
  const int8_t t = u_charType(static_cast<UChar32>(c));
  return t == U_CONNECTOR_PUNCTUATION || t == U_DASH_PUNCTUATION || t == U_START_PUNCTUATION ||
         t == U_END_PUNCTUATION || t == U_INITIAL_PUNCTUATION || t == U_FINAL_PUNCTUATION ||
         t == U_OTHER_PUNCTUATION;
}
bool is_other(char32_t c) {
  const int8_t t = u_charType(static_cast<UChar32>(c));
  return t == U_CONTROL_CHAR || t == U_FORMAT_CHAR || t == U_PRIVATE_USE_CHAR || t == U_SURROGATE;
}
bool is_mark_nonspacing(char32_t c) {
  return u_charType(static_cast<UChar32>(c)) == U_NON_SPACING_MARK;
}
bool is_cjk(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

void append_lower(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
    return;
  }
  // Full (not simple) mapping of this code point alone: no final-sigma context, as Rust's
  // char::to_lowercase.
  UChar src[2];
  int32_t n = 0;
  U16_APPEND_UNSAFE(src, n, static_cast<UChar32>(c));
  UChar dst[8];
  UErrorCode err = U_ZERO_ERROR;
  const int32_t m = u_strToLower(dst, 8, src, n, "", &err);
  if (U_FAILURE(err) || m > 8) {
    append_utf8(out, c);
    return;
  }
  for (int32_t k = 0; k < m;) {
    UChar32 d;
    U16_NEXT(dst, k, m, d);
    append_utf8(out, static_cast<char32_t>(d));
  }
}

std::string unicode_normalize(std::string_view s, NormForm f) {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (f) {
    case NormForm::NFC: n = icu::Normalizer2::getNFCInstance(err); break;
    case NormForm::NFD: n = icu::Normalizer2::getNFDInstance(err); break;
    case NormForm::NFKC: n = icu::Normalizer2::getNFKCInstance(err); break;
    case NormForm::NFKD: n = icu::Normalizer2::getNFKDInstance(err); break;
  }
  if (U_FAILURE(err) || !n) throw Error("ICU: cannot open the Unicode normalizer");
  // Fast path: ASCII is unchanged by every form.
  bool ascii = true;
  for (char ch : s)
    if (static_cast<unsigned char>(ch) >= 0x80) {
      ascii = false;
      break;
    }
  if (ascii) return std::string(s);
  const std::string valid = utf8_lossy(s);
  const icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(valid.data(), static_cast<int32_t>(valid.size())));
  if (n->isNormalized(u, err) && U_SUCCESS(err)) return valid;
  err = U_ZERO_ERROR;
  icu::UnicodeString r = n->normalize(u, err);
  if (U_FAILURE(err)) throw Error("ICU: Unicode normalization failed");
  std::string out;
  r.toUTF8String(out);
  return out;
}

std::vector<size_t> grapheme_bounds(std::string_view s) {
  std::vector<size_t> b;
  UErrorCode err = U_ZERO_ERROR;
  static thread_local std::unique_ptr<icu::BreakIterator> it(icu::BreakIterator::createCharacterInstance(icu::Locale::getRoot(), err));
  if (!it) throw Error("ICU: cannot open the grapheme break iterator");
  // Map UTF-16 boundaries back to byte offsets.
  const icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())));
  std::vector<size_t> byte_at(static_cast<size_t>(u.length()) + 1, s.size());
  {
    size_t bi = 0;
    int32_t ui = 0;
    while (bi < s.size() && ui < u.length()) {
      byte_at[static_cast<size_t>(ui)] = bi;
      const char32_t c = next_cp(s, bi);
      ui += c >= 0x10000 ? 2 : 1;
    }
  }
  it->setText(u);
  for (int32_t p = it->first(); p != icu::BreakIterator::DONE; p = it->next()) b.push_back(byte_at[static_cast<size_t>(p)]);
  if (b.empty() || b.front() != 0) b.insert(b.begin(), 0);
  if (b.back() != s.size()) b.push_back(s.size());
  return b;
}

namespace {
struct ByteMap {
  std::array<std::string, 256> to_char;
  std::array<int, 324> from_char;  // code points 0..323 cover the map
  ByteMap() {
    from_char.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const char32_t c = keep ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
      append_utf8(to_char[b], c);
      from_char[c] = b;
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}
}  // namespace

const std::string& byte_to_char_utf8(uint8_t b) {
  return byte_map().to_char[b];
}
int byte_of_char(char32_t c) {
  return c < 324 ? byte_map().from_char[c] : -1;
}

// ---- Regex -----------------------------------------------------------------------------------
struct Regex::Impl {
  pcre2_code* code = nullptr;
  pcre2_match_context* mctx = nullptr;
  bool jit = false;
  std::string pattern;
};

Regex::Regex(const std::string& pattern, const Where& w) : impl_(std::make_unique<Impl>()) {
  if (pattern.size() > 4096) fail(w, "regex is " + std::to_string(pattern.size()) + " bytes (allowed at most 4096)");
  int errcode = 0;
  PCRE2_SIZE erroff = 0;
  impl_->pattern = pattern;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                              PCRE2_UTF | PCRE2_UCP, &errcode, &erroff, nullptr);
  if (!impl_->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(errcode, msg, sizeof msg);
    fail(w, "regex does not compile at offset " + std::to_string(erroff) + ": " + reinterpret_cast<char*>(msg));
  }
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
  impl_->mctx = pcre2_match_context_create(nullptr);
  pcre2_set_depth_limit(impl_->mctx, 10000);
  pcre2_set_heap_limit(impl_->mctx, 64 * 1024);   // KiB of backtracking memory per match
}

Regex::~Regex() {
  if (impl_->mctx) pcre2_match_context_free(impl_->mctx);
  if (impl_->code) pcre2_code_free(impl_->code);
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view s) const {
  std::vector<std::pair<size_t, size_t>> out;
  // An empty subject has no match, not even an empty one (the reference's find_matches): a
  // Replace normalizer whose pattern can match nothing must leave empty text empty.
  if (s.empty()) return out;
  // Input is made valid UTF-8 by the caller (normalized text); PCRE2 checks once per call.
  thread_local pcre2_match_data* md = nullptr;
  if (!md) md = pcre2_match_data_create(4, nullptr);
  // Steps allowed per match: enough for linear patterns over the whole subject (a repeat costs a
  // few steps per character), far too few for exponential backtracking to run long.
  struct Ctx {
    pcre2_match_context* p;
    ~Ctx() { pcre2_match_context_free(p); }
  } ctx{pcre2_match_context_copy(impl_->mctx)};
  if (!ctx.p) throw Error("tokenizer regex: out of memory");
  pcre2_set_match_limit(ctx.p, static_cast<uint32_t>(std::min<size_t>(1000000 + 64 * s.size(), 2000000000)));
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t pos = 0;
  uint32_t opts = 0;
  while (pos <= s.size()) {
    int rc = impl_->jit ? pcre2_jit_match(impl_->code, subject, s.size(), pos, opts, md, ctx.p)
                        : pcre2_match(impl_->code, subject, s.size(), pos, opts, md, ctx.p);
    // The JIT's machine stack is small: such a subject is matched again by the interpreter, whose
    // backtracking memory is on the heap (bounded by the heap limit).
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) rc = pcre2_match(impl_->code, subject, s.size(), pos, opts | PCRE2_NO_JIT, md, ctx.p);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw Error("tokenizer regex '" + impl_->pattern.substr(0, 80) + "': matching stopped at byte " + std::to_string(pos) +
                  " of " + std::to_string(s.size()) + ": " + reinterpret_cast<char*>(msg));
    }
    opts = PCRE2_NO_UTF_CHECK;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t a = ov[0], b = ov[1];
    // As the reference's Oniguruma iterator: an empty match right where the previous match ended
    // is not reported ("xxb" with x* gives (0,2) and (3,3), not (2,2)).
    if (a != b || out.empty() || out.back().second != a) out.emplace_back(a, b);
    pos = b > a ? b : b + (b < s.size() ? cp_len_at(s, b) : 1);
  }
  return out;
}

std::vector<std::pair<size_t, size_t>> Pattern::find_all(std::string_view s) const {
  if (regex) return regex->find_all(s);
  std::vector<std::pair<size_t, size_t>> out;
  if (literal.empty()) return out;
  for (size_t p = s.find(literal); p != std::string_view::npos; p = s.find(literal, p + literal.size()))
    out.emplace_back(p, p + literal.size());
  return out;
}

}  // namespace hl::hf
