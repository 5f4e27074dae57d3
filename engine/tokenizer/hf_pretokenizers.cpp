// The pre-tokenizers of tokenizer.json (hf_internal.h): ByteLevel (GPT-2 regex, add_prefix_space,
// use_regex, the byte → character map), Split (a literal or an Oniguruma-syntax regex run by PCRE2,
// with the five split behaviours and invert), Metaspace, Digits, Punctuation, Whitespace,
// WhitespaceSplit, BertPreTokenizer and Sequence. Not the model. Reference: huggingface.co/docs/
// tokenizers "Pre-tokenizers"; Radford et al. 2019 (GPT-2's byte-level BPE).
#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "engine/tokenizer/hf_internal.h"

namespace hl::hf {
namespace {

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// Cuts `s` at the given (is_match) ranges that cover it, per `b`; empty pieces dropped.
void apply_behavior(const Split& parent, const std::vector<std::pair<std::pair<size_t, size_t>, bool>>& parts, Behavior b,
                    std::vector<Split>& out) {
  const std::string& s = parent.text;
  std::vector<std::pair<size_t, size_t>> pieces;
  switch (b) {
    case Behavior::Isolated:
      for (const auto& p : parts) pieces.push_back(p.first);
      break;
    case Behavior::Removed:
      for (const auto& p : parts)
        if (!p.second) pieces.push_back(p.first);
      break;
    case Behavior::Contiguous: {
      bool prev_match = false;
      for (const auto& p : parts) {
        if (p.second == prev_match && !pieces.empty()) pieces.back().second = p.first.second;
        else pieces.push_back(p.first);
        prev_match = p.second;
      }
      break;
    }
    case Behavior::MergedWithPrevious: {
      bool prev_match = false;
      for (const auto& p : parts) {
        if (p.second && !prev_match && !pieces.empty()) pieces.back().second = p.first.second;
        else pieces.push_back(p.first);
        prev_match = p.second;
      }
      break;
    }
    case Behavior::MergedWithNext: {  // a match joins the piece after it unless that is a match too
      bool next_match = false;
      for (size_t k = parts.size(); k-- > 0;) {
        const auto& p = parts[k];
        if (p.second && !next_match && !pieces.empty()) pieces.back().first = p.first.first;
        else pieces.push_back(p.first);
        next_match = p.second;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    }
  }
  out.reserve(out.size() + pieces.size());  // one growth per text, not a doubling series of moves
  for (const auto& [a, e] : pieces) {
    if (e <= a) continue;
    out.push_back(Split{s.substr(a, e - a), -1, parent.first && a == 0});
  }
}

// Matches → (range, is_match) parts covering s.
std::vector<std::pair<std::pair<size_t, size_t>, bool>> to_parts(const std::vector<std::pair<size_t, size_t>>& m,
                                                                  size_t n, bool invert) {
  std::vector<std::pair<std::pair<size_t, size_t>, bool>> parts;
  size_t prev = 0;
  for (const auto& [a, b] : m) {
    if (a > prev) parts.push_back({{prev, a}, invert});
    parts.push_back({{a, b}, !invert});
    prev = b;
  }
  if (prev < n) parts.push_back({{prev, n}, invert});
  return parts;
}

// Ranges of runs of code points where pred holds (each code point alone when `single`).
template <class Pred>
std::vector<std::pair<size_t, size_t>> char_matches(std::string_view s, Pred pred, bool single) {
  std::vector<std::pair<size_t, size_t>> m;
  for (size_t i = 0; i < s.size();) {
    const size_t a = i;
    const char32_t c = next_cp(s, i);
    if (!pred(c)) continue;
    if (!single && !m.empty() && m.back().second == a) m.back().second = i;
    else m.emplace_back(a, i);
  }
  return m;
}

template <class Fn>
void for_each_open(std::vector<Split>& splits, Fn fn) {
  std::vector<Split> out;
  out.reserve(splits.size() * 2);
  for (auto& sp : splits) {
    if (sp.id >= 0) out.push_back(std::move(sp));
    else fn(sp, out);
  }
  splits.swap(out);
}

class SplitPT : public PreTokenizer {
 public:
  SplitPT(Pattern p, Behavior b, bool invert) : p_(std::move(p)), b_(b), invert_(invert) {}
  void pre_tokenize(std::vector<Split>& splits) const override {
    for_each_open(splits, [&](Split& sp, std::vector<Split>& out) {
      apply_behavior(sp, to_parts(p_.find_all(sp.text), sp.text.size(), invert_), b_, out);
    });
  }

 private:
  Pattern p_;
  Behavior b_;
  bool invert_;
};

const char* kGpt2Regex = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

class ByteLevelPT : public PreTokenizer {
 public:
  ByteLevelPT(bool prefix, bool use_regex, const Where& w) : prefix_(prefix) {
    if (use_regex) re_ = std::make_unique<Regex>(kGpt2Regex, w);
    for (int c = 0; c < 256; ++c) {  // byte_to_char_utf8 as a local table (no call per byte)
      const std::string& u = byte_to_char_utf8(static_cast<uint8_t>(c));
      map_[c].n = static_cast<uint8_t>(std::min<size_t>(u.size(), sizeof map_[c].b));
      std::memcpy(map_[c].b, u.data(), map_[c].n);
      map_[c].same = u.size() == 1 && static_cast<unsigned char>(u[0]) == c;
    }
  }
  void pre_tokenize(std::vector<Split>& splits) const override {
    for_each_open(splits, [&](Split& sp, std::vector<Split>& out) {
      if (prefix_ && !sp.text.empty() && sp.text[0] != ' ') sp.text.insert(sp.text.begin(), ' ');
      const size_t from = out.size();
      if (re_) apply_behavior(sp, to_parts(re_->find_all(sp.text), sp.text.size(), false), Behavior::Isolated, out);
      else if (!sp.text.empty()) out.push_back(sp);
      thread_local std::string mapped;  // reused: no allocation per word
      for (size_t k = from; k < out.size(); ++k) {
        std::string& t = out[k].text;
        bool same = true;  // printable ASCII maps to itself
        for (unsigned char c : t) same = same && map_[c].same;
        if (same) continue;
        mapped.clear();
        for (unsigned char c : t) mapped.append(map_[c].b, map_[c].n);
        t.assign(mapped);
      }
    });
  }

 private:
  bool prefix_;
  std::unique_ptr<Regex> re_;
  struct Mapped {
    char b[4];  // the UTF-8 of the byte's stand-in character (at most U+0143: two bytes)
    uint8_t n;
    bool same;  // the byte stands for itself
  } map_[256];
};

enum class Prepend { Always, First, Never };

class MetaspacePT : public PreTokenizer {
 public:
  MetaspacePT(std::string rep, Prepend scheme, bool split) : rep_(std::move(rep)), scheme_(scheme), split_(split) {}
  void pre_tokenize(std::vector<Split>& splits) const override {
    for_each_open(splits, [&](Split& sp, std::vector<Split>& out) {
      std::string t;
      t.reserve(sp.text.size() + 3);
      for (char c : sp.text) {
        if (c == ' ') t += rep_;
        else t += c;
      }
      const bool starts = t.compare(0, rep_.size(), rep_) == 0;
      if (!t.empty() && !starts && (scheme_ == Prepend::Always || (scheme_ == Prepend::First && sp.first))) t.insert(0, rep_);
      Split whole{std::move(t), -1, sp.first};
      if (!split_) {
        if (!whole.text.empty()) out.push_back(std::move(whole));
        return;
      }
      std::vector<std::pair<size_t, size_t>> m;
      for (size_t p = whole.text.find(rep_); p != std::string::npos; p = whole.text.find(rep_, p + rep_.size()))
        m.emplace_back(p, p + rep_.size());
      apply_behavior(whole, to_parts(m, whole.text.size(), false), Behavior::MergedWithNext, out);
    });
  }

 private:
  std::string rep_;
  Prepend scheme_;
  bool split_;
};

class CharClassPT : public PreTokenizer {
 public:
  enum Kind { Digits, DigitsSingle, Punct, WhitespaceSplit };
  CharClassPT(Kind k, Behavior b) : k_(k), b_(b) {}
  void pre_tokenize(std::vector<Split>& splits) const override {
    for_each_open(splits, [&](Split& sp, std::vector<Split>& out) {
      std::vector<std::pair<size_t, size_t>> m;
      if (k_ == Digits || k_ == DigitsSingle) m = char_matches(sp.text, is_numeric, k_ == DigitsSingle);
      else if (k_ == Punct) m = char_matches(sp.text, is_punctuation, true);
      else m = char_matches(sp.text, is_whitespace, true);
      apply_behavior(sp, to_parts(m, sp.text.size(), false), b_, out);
    });
  }

 private:
  Kind k_;
  Behavior b_;
};

// Whitespace: the regex \w+|[^\w\s]+, keeping the matches.
class WhitespacePT : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<Split>& splits) const override {
    for_each_open(splits, [&](Split& sp, std::vector<Split>& out) {
      const std::string& s = sp.text;
      std::vector<std::pair<size_t, size_t>> m;
      int run = 0;  // 1: \w run, 2: [^\w\s] run
      for (size_t i = 0; i < s.size();) {
        const size_t a = i;
        const char32_t c = next_cp(s, i);
        const int kind = is_word_char(c) ? 1 : is_whitespace(c) ? 0 : 2;
        if (kind != 0 && kind == run) m.back().second = i;
        else if (kind != 0) m.emplace_back(a, i);
        run = kind;
      }
      apply_behavior(sp, to_parts(m, s.size(), true), Behavior::Removed, out);
    });
  }
};

// BertPreTokenizer: whitespace removed, then every punctuation character isolated.
class BertPT : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<Split>& splits) const override {
    CharClassPT(CharClassPT::WhitespaceSplit, Behavior::Removed).pre_tokenize(splits);
    CharClassPT(CharClassPT::Punct, Behavior::Isolated).pre_tokenize(splits);
  }
};

class SequencePT : public PreTokenizer {
 public:
  std::vector<std::unique_ptr<PreTokenizer>> items;
  void pre_tokenize(std::vector<Split>& splits) const override {
    for (const auto& p : items) p->pre_tokenize(splits);
  }
};

Behavior read_behavior(const nlohmann::json& j, const char* key, Behavior def, const Where& w) {
  const std::string b = opt_string(j, key, "", w);
  if (b.empty()) return def;
  if (b == "Removed") return Behavior::Removed;
  if (b == "Isolated") return Behavior::Isolated;
  if (b == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::MergedWithNext;
  if (b == "Contiguous") return Behavior::Contiguous;
  fail(w.at(key), "'" + b + "' is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
}

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const Where& w, int depth) {
  if (j.is_null()) return nullptr;
  if (!j.is_object()) fail(w, "is not an object");
  if (depth > kMaxDepth) fail(w, "pre-tokenizers nested deeper than " + std::to_string(kMaxDepth));
  const std::string type = get_string(j, "type", w);
  if (type == "ByteLevel")
    return std::make_unique<ByteLevelPT>(opt_bool(j, "add_prefix_space", true, w), opt_bool(j, "use_regex", true, w), w);
  if (type == "Split") {
    const nlohmann::json* p = field(j, "pattern");
    if (!p) fail(w.at("pattern"), "is missing");
    return std::make_unique<SplitPT>(read_pattern(*p, w.at("pattern")),
                                     read_behavior(j, "behavior", Behavior::Isolated, w), opt_bool(j, "invert", false, w));
  }
  if (type == "Metaspace") {
    const std::string rep = opt_string(j, "replacement", "\xE2\x96\x81", w);
    if (rep.empty() || cp_len_at(rep, 0) != rep.size()) fail(w.at("replacement"), "is not one character");
    Prepend scheme = Prepend::Always;
    const std::string ps = opt_string(j, "prepend_scheme", "", w);
    if (ps.empty()) scheme = opt_bool(j, "add_prefix_space", true, w) ? Prepend::Always : Prepend::Never;
    else if (ps == "always") scheme = Prepend::Always;
    else if (ps == "first") scheme = Prepend::First;
    else if (ps == "never") scheme = Prepend::Never;
    else fail(w.at("prepend_scheme"), "'" + ps + "' is not one of always, first, never");
    return std::make_unique<MetaspacePT>(rep, scheme, opt_bool(j, "split", true, w));
  }
  if (type == "Digits")
    return std::make_unique<CharClassPT>(opt_bool(j, "individual_digits", false, w) ? CharClassPT::DigitsSingle : CharClassPT::Digits,
                                         opt_bool(j, "individual_digits", false, w) ? Behavior::Isolated : Behavior::Contiguous);
  if (type == "Punctuation")
    return std::make_unique<CharClassPT>(CharClassPT::Punct, read_behavior(j, "behavior", Behavior::Isolated, w));
  if (type == "Whitespace") return std::make_unique<WhitespacePT>();
  if (type == "WhitespaceSplit") return std::make_unique<CharClassPT>(CharClassPT::WhitespaceSplit, Behavior::Removed);
  if (type == "BertPreTokenizer") return std::make_unique<BertPT>();
  if (type == "Sequence") {
    const nlohmann::json* items = field(j, "pretokenizers");
    if (!items || !items->is_array()) fail(w.at("pretokenizers"), "is not an array");
    if (items->size() > 64) fail(w.at("pretokenizers"), "has " + std::to_string(items->size()) + " items (allowed at most 64)");
    auto seq = std::make_unique<SequencePT>();
    for (size_t k = 0; k < items->size(); ++k)
      if (auto p = make_pre_tokenizer((*items)[k], w.at("pretokenizers").at(k), depth + 1)) seq->items.push_back(std::move(p));
    return seq;
  }
  fail(w.at("type"), "'" + type + "' is not a supported pre-tokenizer (ByteLevel, Split, Metaspace, Digits, "
                     "Punctuation, Whitespace, WhitespaceSplit, BertPreTokenizer, Sequence)");
}

Pattern read_pattern(const nlohmann::json& j, const Where& w) {
  Pattern p;
  if (!j.is_object()) fail(w, "is not an object {\"String\": ...} or {\"Regex\": ...}");
  if (const nlohmann::json* s = field(j, "String")) {
    if (!s->is_string()) fail(w.at("String"), "is not a string");
    p.literal = s->get<std::string>();
    if (p.literal.size() > 4096) fail(w.at("String"), "is longer than 4096 bytes");
    return p;
  }
  if (const nlohmann::json* r = field(j, "Regex")) {
    if (!r->is_string()) fail(w.at("Regex"), "is not a string");
    p.regex = std::make_shared<Regex>(r->get<std::string>(), w.at("Regex"));
    return p;
  }
  fail(w, "has neither \"String\" nor \"Regex\"");
}

}  // namespace hl::hf
