// Post-processors and decoders of tokenizer.json (hf_internal.h). Post-processors add the special
// tokens of one sequence: TemplateProcessing ("single" template), RobertaProcessing and
// BertProcessing (<cls> A <sep>), ByteLevel (no ids added), Sequence. Decoders turn token strings
// back into text: ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, WordPiece, BPEDecoder,
// Sequence. Not pair templates (one sequence only). Reference: huggingface.co/docs/tokenizers.
#include <nlohmann/json.hpp>

#include "engine/tokenizer/hf_internal.h"

namespace hl::hf {
namespace {

class Template : public PostProcessor {
 public:
  std::vector<std::vector<int32_t>> items;  // empty vector: the sequence ($A); else special ids
  std::vector<bool> is_seq;
  void process(std::vector<int32_t>& ids) const override {
    std::vector<int32_t> out;
    out.reserve(ids.size() + 4);
    for (size_t k = 0; k < items.size(); ++k) {
      if (is_seq[k]) out.insert(out.end(), ids.begin(), ids.end());
      else out.insert(out.end(), items[k].begin(), items[k].end());
    }
    ids.swap(out);
  }
};

class Noop : public PostProcessor {
 public:
  void process(std::vector<int32_t>&) const override {}
};

class SequencePP : public PostProcessor {
 public:
  std::vector<std::unique_ptr<PostProcessor>> items;
  void process(std::vector<int32_t>& ids) const override {
    for (const auto& p : items) p->process(ids);
  }
};

int32_t read_pair_id(const nlohmann::json& j, const char* key, const Where& w) {
  const nlohmann::json* p = field(j, key);
  if (!p || !p->is_array() || p->size() != 2 || !(*p)[0].is_string() || !(*p)[1].is_number_integer())
    fail(w.at(key), "is not [token, id]");
  const int64_t id = (*p)[1].get<int64_t>();
  if (id < 0 || id > INT32_MAX) fail(w.at(key), "id " + std::to_string(id) + " is outside [0, 2147483647]");
  return static_cast<int32_t>(id);
}

std::unique_ptr<PostProcessor> read_template(const nlohmann::json& j, const Where& w) {
  const nlohmann::json* single = field(j, "single");
  if (!single || !single->is_array()) fail(w.at("single"), "is not an array");
  if (single->size() > 64) fail(w.at("single"), "has more than 64 items");
  const nlohmann::json* specials = field(j, "special_tokens");
  auto t = std::make_unique<Template>();
  for (size_t k = 0; k < single->size(); ++k) {
    const nlohmann::json& it = (*single)[k];
    const Where wk = w.at("single").at(k);
    if (!it.is_object()) fail(wk, "is not an object");
    if (field(it, "Sequence")) {
      t->items.emplace_back();
      t->is_seq.push_back(true);
      continue;
    }
    const nlohmann::json* st = field(it, "SpecialToken");
    if (!st || !st->is_object()) fail(wk, "is neither {\"Sequence\": ...} nor {\"SpecialToken\": ...}");
    const std::string name = get_string(*st, "id", wk.at("SpecialToken"));
    const nlohmann::json* sp = specials && specials->is_object() ? field(*specials, name.c_str()) : nullptr;
    if (!sp || !sp->is_object()) fail(w.at("special_tokens"), "has no entry '" + name + "' used by single[" + std::to_string(k) + "]");
    const nlohmann::json* ids = field(*sp, "ids");
    if (!ids || !ids->is_array() || ids->size() > 64) fail(w.at("special_tokens").at(name).at("ids"), "is not an array of at most 64 ids");
    std::vector<int32_t> v;
    for (const auto& x : *ids) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX)
        fail(w.at("special_tokens").at(name).at("ids"), "holds an id outside [0, 2147483647]");
      v.push_back(static_cast<int32_t>(x.get<int64_t>()));
    }
    t->items.push_back(std::move(v));
    t->is_seq.push_back(false);
  }
  return t;
}

// ---- decoders --------------------------------------------------------------------------------
class ByteLevelDec : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      std::string mine;
      bool ok = true;
      for (size_t i = 0; i < t.size() && ok;) {
        const int b = byte_of_char(next_cp(t, i));
        if (b < 0) ok = false;
        else mine += static_cast<char>(b);
      }
      bytes += ok ? mine : t;
    }
    tokens.assign(1, utf8_lossy(bytes));
  }
};

class MetaspaceDec : public Decoder {
 public:
  MetaspaceDec(std::string rep, bool prepend) : rep_(std::move(rep)), prepend_(prepend) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t k = 0; k < tokens.size(); ++k) {
      std::string out;
      const std::string& t = tokens[k];
      for (size_t i = 0; i < t.size();) {
        if (t.compare(i, rep_.size(), rep_) == 0) {
          if (!(k == 0 && prepend_)) out += ' ';
          i += rep_.size();
        } else {
          out += t[i++];
        }
      }
      tokens[k].swap(out);
    }
  }

 private:
  std::string rep_;
  bool prepend_;
};

bool parse_byte_token(const std::string& t, unsigned char& b) {
  if (t.size() != 6 || t[0] != '<' || t[1] != '0' || t[2] != 'x' || t[5] != '>') return false;
  unsigned v = 0;
  for (int k = 3; k < 5; ++k) {
    const char c = t[static_cast<size_t>(k)];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= static_cast<unsigned>(c - '0');
    else if (c >= 'A' && c <= 'F') v |= static_cast<unsigned>(c - 'A' + 10);
    else if (c >= 'a' && c <= 'f') v |= static_cast<unsigned>(c - 'a' + 10);
    else return false;
  }
  b = static_cast<unsigned char>(v);
  return true;
}

class ByteFallbackDec : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    const auto flush = [&]() {
      if (pending.empty()) return;
      if (is_valid_utf8(pending)) out.push_back(pending);
      else
        for (size_t k = 0; k < pending.size(); ++k) out.push_back("\xEF\xBF\xBD");
      pending.clear();
    };
    for (const std::string& t : tokens) {
      unsigned char b;
      if (parse_byte_token(t, b)) {
        pending += static_cast<char>(b);
      } else {
        flush();
        out.push_back(t);
      }
    }
    flush();
    tokens.swap(out);
  }
};

class FuseDec : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, all);
  }
};

class StripDec : public Decoder {
 public:
  StripDec(char32_t c, size_t start, size_t stop) : c_(c), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      std::vector<std::pair<size_t, char32_t>> cps;
      for (size_t i = 0; i < t.size();) {
        const size_t a = i;
        cps.emplace_back(a, next_cp(t, i));
      }
      size_t a = 0, b = cps.size();
      for (size_t k = 0; k < start_ && k < cps.size(); ++k) {
        if (cps[k].second != c_) break;
        a = k + 1;
      }
      for (size_t k = 0; k < stop_ && k < cps.size(); ++k) {
        const size_t idx = cps.size() - k - 1;
        if (cps[idx].second != c_) break;
        b = idx;
      }
      if (b < a) b = a;
      const size_t from = a < cps.size() ? cps[a].first : t.size();
      const size_t to = b < cps.size() ? cps[b].first : t.size();
      t = t.substr(from, to - from);
    }
  }

 private:
  char32_t c_;
  size_t start_, stop_;
};

class ReplaceDec : public Decoder {
 public:
  ReplaceDec(Pattern p, std::string content) : p_(std::move(p)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      const auto m = p_.find_all(t);
      if (m.empty()) continue;
      std::string out;
      size_t prev = 0;
      for (const auto& [a, b] : m) {
        out.append(t, prev, a - prev);
        out += content_;
        prev = b;
      }
      out.append(t, prev, std::string::npos);
      t.swap(out);
    }
  }

 private:
  Pattern p_;
  std::string content_;
};

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
}

class WordPieceDec : public Decoder {
 public:
  WordPieceDec(std::string prefix, bool cleanup) : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t k = 0; k < tokens.size(); ++k) {
      std::string& t = tokens[k];
      if (k != 0) {
        if (t.compare(0, prefix_.size(), prefix_) == 0) t.erase(0, prefix_.size());
        else t.insert(0, " ");
      }
      if (cleanup_) {
        replace_all(t, " .", ".");
        replace_all(t, " ?", "?");
        replace_all(t, " !", "!");
        replace_all(t, " ,", ",");
        replace_all(t, " ' ", "'");
        replace_all(t, " n't", "n't");
        replace_all(t, " 'm", "'m");
        replace_all(t, " do not", " don't");
        replace_all(t, " 's", "'s");
        replace_all(t, " 've", "'ve");
        replace_all(t, " 're", "'re");
      }
    }
  }

 private:
  std::string prefix_;
  bool cleanup_;
};

class BpeDec : public Decoder {  // end_of_word suffix → space (the last token: nothing)
 public:
  explicit BpeDec(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t k = 0; k < tokens.size(); ++k) replace_all(tokens[k], suffix_, k + 1 == tokens.size() ? "" : " ");
  }

 private:
  std::string suffix_;
};

class SequenceDec : public Decoder {
 public:
  std::vector<std::unique_ptr<Decoder>> items;
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& d : items) d->decode_chain(tokens);
  }
};

}  // namespace

std::unique_ptr<PostProcessor> make_bos_eos_template(int32_t bos, int32_t eos) {
  auto t = std::make_unique<Template>();
  if (bos >= 0) {
    t->items.push_back({bos});
    t->is_seq.push_back(false);
  }
  t->items.emplace_back();
  t->is_seq.push_back(true);
  if (eos >= 0) {
    t->items.push_back({eos});
    t->is_seq.push_back(false);
  }
  return t;
}

std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& j, const Where& w, int depth) {
  if (j.is_null()) return nullptr;
  if (!j.is_object()) fail(w, "is not an object");
  if (depth > kMaxDepth) fail(w, "post-processors nested deeper than " + std::to_string(kMaxDepth));
  const std::string type = get_string(j, "type", w);
  if (type == "TemplateProcessing") return read_template(j, w);
  if (type == "RobertaProcessing" || type == "BertProcessing")
    return make_bos_eos_template(read_pair_id(j, "cls", w), read_pair_id(j, "sep", w));
  if (type == "ByteLevel") return std::make_unique<Noop>();
  if (type == "Sequence") {
    const nlohmann::json* items = field(j, "processors");
    if (!items || !items->is_array() || items->size() > 64) fail(w.at("processors"), "is not an array of at most 64 items");
    auto seq = std::make_unique<SequencePP>();
    for (size_t k = 0; k < items->size(); ++k)
      if (auto p = make_post_processor((*items)[k], w.at("processors").at(k), depth + 1)) seq->items.push_back(std::move(p));
    return seq;
  }
  fail(w.at("type"), "'" + type + "' is not a supported post-processor (TemplateProcessing, RobertaProcessing, "
                     "BertProcessing, ByteLevel, Sequence)");
}

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j, const Where& w, int depth) {
  if (j.is_null()) return nullptr;
  if (!j.is_object()) fail(w, "is not an object");
  if (depth > kMaxDepth) fail(w, "decoders nested deeper than " + std::to_string(kMaxDepth));
  const std::string type = get_string(j, "type", w);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDec>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDec>();
  if (type == "Fuse") return std::make_unique<FuseDec>();
  if (type == "Metaspace") {
    const std::string rep = opt_string(j, "replacement", "\xE2\x96\x81", w);
    if (rep.empty()) fail(w.at("replacement"), "is empty");
    const std::string ps = opt_string(j, "prepend_scheme", "", w);
    const bool prepend = ps.empty() ? opt_bool(j, "add_prefix_space", true, w) : ps != "never";
    return std::make_unique<MetaspaceDec>(rep, prepend);
  }
  if (type == "Strip") {
    const std::string c = get_string(j, "content", w);
    size_t i = 0;
    const char32_t cp = c.empty() ? 0 : next_cp(c, i);
    if (c.empty() || i != c.size()) fail(w.at("content"), "is not one character");
    return std::make_unique<StripDec>(cp, static_cast<size_t>(opt_int(j, "start", 0, 0, 1 << 20, w)),
                                      static_cast<size_t>(opt_int(j, "stop", 0, 0, 1 << 20, w)));
  }
  if (type == "Replace") {
    const nlohmann::json* p = field(j, "pattern");
    if (!p) fail(w.at("pattern"), "is missing");
    return std::make_unique<ReplaceDec>(read_pattern(*p, w.at("pattern")), get_string(j, "content", w));
  }
  if (type == "WordPiece") return std::make_unique<WordPieceDec>(opt_string(j, "prefix", "##", w), opt_bool(j, "cleanup", true, w));
  if (type == "BPEDecoder") return std::make_unique<BpeDec>(opt_string(j, "suffix", "</w>", w));
  if (type == "Sequence") {
    const nlohmann::json* items = field(j, "decoders");
    if (!items || !items->is_array() || items->size() > 64) fail(w.at("decoders"), "is not an array of at most 64 items");
    auto seq = std::make_unique<SequenceDec>();
    for (size_t k = 0; k < items->size(); ++k)
      if (auto d = make_decoder((*items)[k], w.at("decoders").at(k), depth + 1)) seq->items.push_back(std::move(d));
    return seq;
  }
  fail(w.at("type"), "'" + type + "' is not a supported decoder (ByteLevel, Metaspace, ByteFallback, Fuse, Strip, "
                     "Replace, WordPiece, BPEDecoder, Sequence)");
}

}  // namespace hl::hf
