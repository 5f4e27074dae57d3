// The Unigram and WordPiece models of tokenizer.json (hf_internal.h). Unigram: the best-scoring
// segmentation by Viterbi over a byte trie of the pieces, unknown characters scored min - 10 and
// fused, byte_fallback to <0xNN> pieces. WordPiece: greedy longest match with the "##" continuation
// prefix, the whole word becoming [UNK] when any part fails. Not training, not sampling.
// References: Kudo 2018 (subword regularization, the unigram model); Schuster & Nakajima 2012 and
// Devlin et al. 2019 (WordPiece as BERT uses it).
#include <cstdio>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "engine/core/error.h"
#include "engine/tokenizer/hf_internal.h"
#include "engine/tokenizer/hf_tables.h"

namespace hl::hf {
namespace {

struct SvHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, int32_t, SvHash, std::equal_to<>>;
constexpr size_t kMaxVocab = 4u << 20;

// A byte trie over the pieces: children as sorted (byte, node) lists.
struct Trie {
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> kids;
    int32_t id = -1;
  };
  std::vector<Node> nodes{Node{}};
  void insert(std::string_view s, int32_t id) {
    int32_t at = 0;
    for (unsigned char c : s) {
      int32_t nx = -1;
      for (const auto& [b, k] : nodes[static_cast<size_t>(at)].kids)
        if (b == c) nx = k;
      if (nx < 0) {
        nx = static_cast<int32_t>(nodes.size());
        nodes[static_cast<size_t>(at)].kids.emplace_back(c, nx);
        nodes.emplace_back();
      }
      at = nx;
    }
    nodes[static_cast<size_t>(at)].id = id;
  }
};

class Unigram : public Model {
 public:
  Unigram(const nlohmann::json& j, const Where& w) {
    const nlohmann::json* v = field(j, "vocab");
    if (!v || !v->is_array()) fail(w.at("vocab"), "is not an array of [piece, score]");
    if (v->empty() || v->size() > kMaxVocab) fail(w.at("vocab"), "has " + std::to_string(v->size()) + " pieces (allowed 1.." + std::to_string(kMaxVocab) + ")");
    pieces_.reserve(v->size());
    scores_.reserve(v->size());
    min_score_ = 1e300;
    for (size_t k = 0; k < v->size(); ++k) {
      const nlohmann::json& e = (*v)[k];
      if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_number())
        fail(w.at("vocab").at(k), "is not [piece, score]");
      pieces_.push_back(e[0].get<std::string>());
      const double sc = e[1].get<double>();
      if (!(sc > -1e30 && sc < 1e30)) fail(w.at("vocab").at(k), "score is outside (-1e30, 1e30)");
      scores_.push_back(sc);
      min_score_ = std::min(min_score_, sc);
      ids_[pieces_.back()] = static_cast<int32_t>(k);
    }
    for (const auto& [p, id] : ids_) trie_.insert(p, id);  // equal pieces: the last id, as the reference
    const int64_t unk = opt_int(j, "unk_id", -1, -1, static_cast<int64_t>(pieces_.size()) - 1, w);
    unk_id_ = static_cast<int32_t>(unk);
    byte_fallback_ = opt_bool(j, "byte_fallback", false, w);
  }

  void tokenize(std::string_view s, std::vector<int32_t>& out) const override {
    if (s.empty()) return;
    struct Best {
      double score = 0;
      int32_t id = -1;
      int64_t start = -1;
    };
    std::vector<Best> best(s.size() + 1);
    const double unk_score = min_score_ - 10.0;
    for (size_t at = 0; at < s.size();) {
      const double here = best[at].score;
      const size_t mblen = cp_len_at(s, at);
      bool single = false;
      int32_t node = 0;
      for (size_t e = at; e < s.size(); ++e) {
        int32_t nx = -1;
        for (const auto& [b, k] : trie_.nodes[static_cast<size_t>(node)].kids)
          if (b == static_cast<unsigned char>(s[e])) {
            nx = k;
            break;
          }
        if (nx < 0) break;
        node = nx;
        const int32_t id = trie_.nodes[static_cast<size_t>(node)].id;
        if (id < 0) continue;
        Best& t = best[e + 1];
        const double cand = scores_[static_cast<size_t>(id)] + here;
        if (t.start < 0 || cand > t.score) t = Best{cand, id, static_cast<int64_t>(at)};
        if (e + 1 - at == mblen) single = true;
      }
      if (!single) {
        if (unk_id_ < 0) throw Error("Unigram model: a character is not in the vocabulary and unk_id is not set");
        Best& t = best[at + mblen];
        const double cand = unk_score + here;
        if (t.start < 0 || cand > t.score) t = Best{cand, unk_id_, static_cast<int64_t>(at)};
      }
      at += mblen;
    }
    // Back from the end; consecutive unknowns fuse into one piece.
    std::vector<std::pair<size_t, size_t>> segs;  // [start, end)
    std::vector<bool> is_unk;
    for (size_t end = s.size(); end > 0;) {
      const Best& b = best[end];
      const size_t start = static_cast<size_t>(b.start);
      const bool u = b.id == unk_id_;
      if (u && !segs.empty() && is_unk.back()) segs.back().first = start;
      else {
        segs.emplace_back(start, end);
        is_unk.push_back(u);
      }
      end = start;
    }
    for (size_t k = segs.size(); k-- > 0;) {
      const std::string_view piece = s.substr(segs[k].first, segs[k].second - segs[k].first);
      auto it = ids_.find(piece);
      if (it != ids_.end()) {
        out.push_back(it->second);
        continue;
      }
      if (byte_fallback_) {
        std::vector<int32_t> bytes;
        for (unsigned char c : piece) {
          char name[8];
          std::snprintf(name, sizeof name, "<0x%02X>", c);
          auto b = ids_.find(std::string_view(name));
          if (b == ids_.end()) break;
          bytes.push_back(b->second);
        }
        if (bytes.size() == piece.size()) {
          out.insert(out.end(), bytes.begin(), bytes.end());
          continue;
        }
      }
      out.push_back(unk_id_);
    }
  }

  int32_t token_to_id(std::string_view t) const override {
    auto it = ids_.find(t);
    return it == ids_.end() ? -1 : it->second;
  }
  std::optional<std::string_view> id_to_token(int32_t id) const override {
    if (id < 0 || static_cast<size_t>(id) >= pieces_.size()) return std::nullopt;
    return std::string_view(pieces_[static_cast<size_t>(id)]);
  }
  int64_t vocab_size() const override { return static_cast<int64_t>(pieces_.size()); }

 private:
  std::vector<std::string> pieces_;
  std::vector<double> scores_;
  double min_score_ = 0;
  Vocab ids_;
  Trie trie_;
  int32_t unk_id_ = -1;
  bool byte_fallback_ = false;
};

class WordPiece : public Model {
 public:
  WordPiece(const nlohmann::json& j, const Where& w, const RawModelParts& raw) {
    tokens_ = invert_vocab(vocab_, read_vocab_map(j, w, raw, vocab_));
    prefix_ = opt_string(j, "continuing_subword_prefix", "##", w);
    max_chars_ = static_cast<size_t>(opt_int(j, "max_input_chars_per_word", 100, 1, 1 << 20, w));
    const std::string unk = opt_string(j, "unk_token", "[UNK]", w);
    unk_id_ = vocab_.find(unk);
    if (unk_id_ < 0) fail(w.at("unk_token"), "'" + unk + "' is not in the vocabulary");
  }

  void tokenize(std::string_view s, std::vector<int32_t>& out) const override {
    size_t chars = 0;
    for (size_t i = 0; i < s.size(); i += cp_len_at(s, i)) ++chars;
    if (chars > max_chars_) {
      out.push_back(unk_id_);
      return;
    }
    const size_t from = out.size();
    std::string buf;
    for (size_t start = 0; start < s.size();) {
      size_t end = s.size();
      int32_t found = -1;
      while (start < end) {
        std::string_view sub = s.substr(start, end - start);
        if (start > 0) {
          buf.assign(prefix_);
          buf.append(sub);
          sub = buf;
        }
        found = vocab_.find(sub);
        if (found >= 0) break;
        // drop the last code point
        size_t k = end - 1;
        while (k > start && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
        end = k;
      }
      if (found < 0) {
        out.resize(from);
        out.push_back(unk_id_);
        return;
      }
      out.push_back(found);
      start = end;
    }
  }

  int32_t token_to_id(std::string_view t) const override { return vocab_.find(t); }
  std::optional<std::string_view> id_to_token(int32_t id) const override {
    return id >= 0 && static_cast<size_t>(id) < tokens_.size() ? tokens_[static_cast<size_t>(id)] : std::nullopt;
  }
  int64_t vocab_size() const override { return static_cast<int64_t>(vocab_.size()); }

 private:
  StringIds vocab_;
  std::vector<std::optional<std::string_view>> tokens_;
  std::string prefix_;
  size_t max_chars_ = 100;
  int32_t unk_id_ = -1;
};

}  // namespace

std::unique_ptr<Model> make_unigram(const nlohmann::json& j, const Where& w) {
  return std::make_unique<Unigram>(j, w);
}
std::unique_ptr<Model> make_wordpiece(const nlohmann::json& j, const Where& w, const RawModelParts& raw) {
  return std::make_unique<WordPiece>(j, w, raw);
}

}  // namespace hl::hf
