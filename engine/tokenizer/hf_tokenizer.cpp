// The tokenizer.json pipeline (hf_internal.h): added tokens matched first (leftmost-longest, with
// single_word / lstrip / rstrip, on the raw text for normalized=false and on the normalized text
// otherwise), then normalizer, pre-tokenizer, model and, with special tokens, the post-processor;
// decode through the decoder chain. Not the file reader (hf_reader.cpp). Reference: the
// `tokenizers` library's documentation, "The tokenization pipeline".
#include <algorithm>

#include "engine/core/error.h"
#include "engine/tokenizer/hf_internal.h"

namespace hl::hf {

void AddedMatcher::add(const std::string& pattern, int32_t index) {
  if (pattern.empty()) return;
  int32_t at = 0;
  for (unsigned char c : pattern) {
    int32_t nx = -1;
    for (const auto& [b, k] : nodes_[static_cast<size_t>(at)].kids)
      if (b == c) nx = k;
    if (nx < 0) {
      nx = static_cast<int32_t>(nodes_.size());
      nodes_[static_cast<size_t>(at)].kids.emplace_back(c, nx);
      nodes_.emplace_back();
    }
    at = nx;
  }
  // Equal contents: the token added last wins, as a map insert in the reference.
  nodes_[static_cast<size_t>(at)].index = index;
  root_ready_ = false;
}

std::pair<int32_t, size_t> AddedMatcher::longest_at(std::string_view s, size_t i) const {
  int32_t at = root_[static_cast<unsigned char>(s[i])];
  if (at < 0) return {-1, 0};
  std::pair<int32_t, size_t> best{-1, 0};
  size_t j = i + 1;
  for (;;) {
    const Node& n = nodes_[static_cast<size_t>(at)];
    if (n.index >= 0) best = {n.index, j - i};
    if (j >= s.size()) break;
    int32_t nx = -1;
    for (const auto& [b, k] : n.kids)
      if (b == static_cast<unsigned char>(s[j])) {
        nx = k;
        break;
      }
    if (nx < 0) break;
    at = nx;
    ++j;
  }
  return best;
}

namespace {
bool word_before(std::string_view s, size_t end) {  // regex \w$ on s[..end]
  if (end == 0) return false;
  size_t k = end - 1;
  while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
  size_t i = k;
  return is_word_char(next_cp(s, i));
}
bool word_after(std::string_view s, size_t start) {  // regex ^\w on s[start..]
  if (start >= s.size()) return false;
  size_t i = start;
  return is_word_char(next_cp(s, i));
}
}  // namespace

void HfTokenizer::finish() {
  by_id_.clear();
  for (size_t k = 0; k < added.size(); ++k) {
    const AddedToken& t = added[k];
    by_id_.emplace_back(t.id, static_cast<int32_t>(k));
    if (!t.normalized) {
      raw_.add(t.content, static_cast<int32_t>(k));
    } else {
      std::string n = t.content;
      if (normalizer) normalizer->normalize(n);
      normalized_.add(n, static_cast<int32_t>(k));
    }
  }
  std::stable_sort(by_id_.begin(), by_id_.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (AddedMatcher* m : {&raw_, &normalized_}) {
    std::fill(std::begin(m->root_), std::end(m->root_), -1);
    for (const auto& [b, k] : m->nodes_[0].kids) m->root_[b] = k;
    m->root_ready_ = true;
  }
}

const AddedToken* HfTokenizer::added_by_id(int32_t id) const {
  auto it = std::lower_bound(by_id_.begin(), by_id_.end(), std::make_pair(id, INT32_MIN));
  // several entries may share an id: the last one added is the one the reference keeps
  const AddedToken* found = nullptr;
  for (; it != by_id_.end() && it->first == id; ++it) found = &added[static_cast<size_t>(it->second)];
  return found;
}

// Cuts `in` (an open split) at the matches of `m`, as the reference's find_matches.
void HfTokenizer::split_added(const Split& in, const AddedMatcher& m, std::vector<Split>& out) const {
  const std::string& s = in.text;
  if (m.empty() || s.empty()) {
    out.push_back(in);
    return;
  }
  size_t start_offset = 0;
  size_t i = 0;
  const auto push_open = [&](size_t a, size_t b) {
    if (b > a) out.push_back(Split{s.substr(a, b - a), -1, in.first && a == 0});
  };
  while (i < s.size()) {
    const auto [index, len] = m.longest_at(s, i);
    if (index < 0) {
      ++i;
      continue;
    }
    const AddedToken& t = added[static_cast<size_t>(index)];
    size_t start = i, stop = i + len;
    i = stop;
    if (t.single_word && (word_before(s, start) || word_after(s, stop))) continue;
    if (t.lstrip) {
      size_t ns = start;
      while (ns > 0) {
        size_t k = ns - 1;
        while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
        size_t q = k;
        if (!is_whitespace(next_cp(s, q))) break;
        ns = k;
      }
      start = std::max(ns, start_offset);
    }
    if (t.rstrip) {
      while (stop < s.size()) {
        size_t q = stop;
        if (!is_whitespace(next_cp(s, q))) break;
        stop = q;
      }
      i = stop;
    }
    push_open(start_offset, start);
    out.push_back(Split{s.substr(start, stop - start), t.id, in.first && start == 0});
    start_offset = stop;
  }
  push_open(start_offset, s.size());
}

std::vector<int32_t> HfTokenizer::run(const std::string& input, bool add_special) const {
  const std::string text = utf8_lossy(input);
  std::vector<Split> splits;
  split_added(Split{text, -1, true}, raw_, splits);
  std::vector<Split> normed;
  normed.reserve(splits.size());
  for (Split& sp : splits) {
    if (sp.id >= 0) {
      normed.push_back(std::move(sp));
      continue;
    }
    if (normalizer) normalizer->normalize(sp.text);
    split_added(sp, normalized_, normed);
  }
  if (pre_tokenizer) pre_tokenizer->pre_tokenize(normed);
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  for (const Split& sp : normed) {
    if (sp.id >= 0) ids.push_back(sp.id);
    else model->tokenize(sp.text, ids);
  }
  if (add_special && post_processor) post_processor->process(ids);
  return ids;
}

std::string HfTokenizer::raw_piece(int32_t id) const {
  if (const AddedToken* t = added_by_id(id)) return t->content;
  const auto p = model->id_to_token(id);
  return p ? std::string(*p) : std::string();
}

bool HfTokenizer::is_special(int32_t id) const {
  const AddedToken* t = added_by_id(id);
  return t && t->special;
}

std::string HfTokenizer::token_bytes(int32_t id) const {
  if (const AddedToken* t = added_by_id(id)) return t->content;
  const auto piece = model->id_to_token(id);
  if (!piece) return std::string();
  const std::string_view* p = &*piece;
  if (byte_level_pieces) {
    std::string bytes;
    for (size_t i = 0; i < p->size();) {
      const int b = byte_of_char(next_cp(*p, i));
      if (b < 0) return std::string(*p);
      bytes += static_cast<char>(b);
    }
    return bytes;
  }
  // <0xNN> byte-fallback pieces
  if (p->size() == 6 && p->compare(0, 3, "<0x") == 0 && (*p)[5] == '>') {
    unsigned v = 0;
    bool ok = true;
    for (size_t k = 3; k < 5; ++k) {
      const char c = (*p)[k];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<unsigned>(c - '0');
      else if (c >= 'A' && c <= 'F') v |= static_cast<unsigned>(c - 'A' + 10);
      else ok = false;
    }
    if (ok) return std::string(1, static_cast<char>(v));
  }
  std::string out;  // SentencePiece word marks as spaces
  for (size_t i = 0; i < p->size(); ++i) {
    if (p->compare(i, 3, "\xE2\x96\x81") == 0) {
      out += ' ';
      i += 2;
    } else {
      out += (*p)[i];
    }
  }
  return out;
}

std::string HfTokenizer::piece(int32_t id) const {
  if (id < 0 || (!added_by_id(id) && !model->id_to_token(id))) return "<id " + std::to_string(id) + ">";
  return display_pieces(*this, {id}).front();
}

std::string HfTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (const AddedToken* t = added_by_id(id)) tokens.push_back(t->content);
    else if (const auto p = model->id_to_token(id)) tokens.emplace_back(*p);
  }
  if (!decoder) {
    std::string out;
    for (size_t k = 0; k < tokens.size(); ++k) out += (k ? " " : "") + tokens[k];
    return out;
  }
  decoder->decode_chain(tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

int64_t HfTokenizer::vocab_size() const {
  int64_t n = model->vocab_size();
  for (const auto& [id, k] : by_id_) n = std::max<int64_t>(n, int64_t{id} + 1);
  return n;
}

}  // namespace hl::hf
