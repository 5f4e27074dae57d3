// The BPE model of tokenizer.json (hf_internal.h): vocabulary and ranked merges (as "a b" strings or
// [a, b] pairs), byte-level or SentencePiece-style with byte_fallback, fuse_unk, unk_token,
// ignore_merges, continuing_subword_prefix and end_of_word_suffix; a word cache as Hugging Face
// keeps. Merging takes the lowest-ranked adjacent pair first (leftmost on ties), as the reference.
// Not dropout (training only). Reference: Sennrich et al. 2016 (BPE for NMT); huggingface.co/docs/tokenizers.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>

#include "engine/tokenizer/hf_internal.h"
#include "engine/tokenizer/hf_tables.h"

namespace hl::hf {
namespace {

constexpr size_t kMaxVocab = 4u << 20;   // entries (and ids below this)
constexpr size_t kMaxMerges = 4u << 20;  // entries
constexpr size_t kCacheWords = 1u << 17; // cache is cleared when this full
constexpr size_t kCacheMaxWordBytes = 256;
constexpr size_t kScanMergeMax = 48;     // words of up to this many symbols merge by scanning

class Bpe : public Model {
 public:
  Bpe(const nlohmann::json& j, const Where& w, const RawModelParts& raw) {
    const int32_t max_id = read_vocab_map(j, w, raw, vocab_);
    tokens_ = invert_vocab(vocab_, max_id);
    size_ = static_cast<int64_t>(vocab_.size());
    byte_fallback_ = opt_bool(j, "byte_fallback", false, w);
    fuse_unk_ = opt_bool(j, "fuse_unk", false, w);
    ignore_merges_ = opt_bool(j, "ignore_merges", false, w);
    prefix_ = opt_string(j, "continuing_subword_prefix", "", w);
    suffix_ = opt_string(j, "end_of_word_suffix", "", w);
    const std::string unk = opt_string(j, "unk_token", "", w);
    if (!unk.empty()) {
      unk_id_ = vocab_.find(unk);
      if (unk_id_ < 0) fail(w.at("unk_token"), "'" + unk + "' is not in the vocabulary");
    }
    read_merges(j, w, raw);
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      byte_id_[b] = vocab_.find(std::string_view(name));
    }
    char_id_.assign(512, -1);
    if (prefix_.empty() && suffix_.empty())
      for (char32_t c = 0; c < 512; ++c) {
        std::string s;
        append_utf8(s, c);
        char_id_[c] = vocab_.find(s);
      }
  }

  void tokenize(std::string_view word, std::vector<int32_t>& out) const override {
    if (word.empty()) return;
    // First a per-thread direct-mapped cache of short words: no lock, one probe.
    FastSlot* slot = nullptr;
    uint64_t tag = 0;
    if (word.size() <= sizeof(FastSlot::key)) {
      tag = std::hash<std::string_view>{}(word) | 1;
      slot = &fast_cache()[tag & (kFastSlots - 1)];
      if (slot->tag == tag && slot->klen == word.size() && std::memcmp(slot->key, word.data(), word.size()) == 0) {
        out.insert(out.end(), slot->ids, slot->ids + slot->n);
        return;
      }
    }
    const size_t from = out.size();
    tokenize_slow(word, out, tag);
    const size_t n = out.size() - from;
    if (slot && n <= sizeof(FastSlot::ids) / sizeof(int32_t)) {
      slot->tag = tag;
      slot->klen = static_cast<uint8_t>(word.size());
      slot->n = static_cast<uint8_t>(n);
      std::memcpy(slot->key, word.data(), word.size());
      std::copy(out.begin() + static_cast<std::ptrdiff_t>(from), out.end(), slot->ids);
    }
  }

  // hash: the word's std::hash (| 1) when the caller has it, else 0.
  void tokenize_slow(std::string_view word, std::vector<int32_t>& out, uint64_t hash) const {
    if (ignore_merges_) {
      const int32_t id = vocab_.find(word);
      if (id >= 0) {
        out.push_back(id);
        return;
      }
    }
    const bool cacheable = word.size() <= kCacheMaxWordBytes;
    const uint64_t h = !cacheable ? 0 : hash ? hash : std::hash<std::string_view>{}(word);
    if (cacheable) {
      std::lock_guard<std::mutex> lock(cache_mu_);
      if (cache_.get(word, h, out)) return;
    }
    const size_t from = out.size();
    merge_word(word, out);
    if (cacheable) {
      std::lock_guard<std::mutex> lock(cache_mu_);
      cache_.put(word, h, out.data() + from, out.size() - from);
    }
  }

  int32_t token_to_id(std::string_view t) const override { return vocab_.find(t); }
  std::optional<std::string_view> id_to_token(int32_t id) const override {
    return id >= 0 && static_cast<size_t>(id) < tokens_.size() ? tokens_[static_cast<size_t>(id)] : std::nullopt;
  }
  int64_t vocab_size() const override { return size_; }

 private:
  struct FastSlot {
    uint64_t tag = 0;  // hash | 1; 0: empty
    uint8_t klen = 0, n = 0;
    char key[30];
    int32_t ids[8];
  };
  static constexpr size_t kFastSlots = size_t{1} << 14;
  // Direct-mapped cache of merge-table answers, (left, right) → (rank, merged id): the merge table
  // of a 150k-merge vocabulary is megabytes (a cache miss per probe), while the pairs met in words
  // not seen before are mostly few (letter pairs and common stems): 64 KiB, stays in L2.
  struct PairSlot {
    uint64_t key = ~uint64_t{0};
    int32_t rank = -1, id = -1;
  };
  static constexpr size_t kPairSlots = size_t{1} << 12;
  struct ThreadCaches {
    uint64_t owner = 0;
    std::vector<FastSlot> words;
    std::vector<PairSlot> pairs;
  };
  // This thread's caches for this tokenizer; a thread that switches tokenizers starts new ones.
  ThreadCaches& caches() const {
    thread_local ThreadCaches c;
    if (c.owner != instance_) {
      c.words.assign(kFastSlots, FastSlot{});
      c.pairs.assign(kPairSlots, PairSlot{});
      c.owner = instance_;
    }
    return c;
  }
  FastSlot* fast_cache() const { return caches().words.data(); }
  std::pair<int32_t, int32_t> find_pair(PairSlot* pc, int32_t a, int32_t b) const {
    const uint64_t k = static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32 | static_cast<uint32_t>(b);
    PairSlot& s = pc[((k >> 32) * 0x9E3779B1u + (k & 0xFFFFFFFFu) * 0x85EBCA77u) >> 7 & (kPairSlots - 1)];
    if (s.key != k) {
      const auto [r, id] = merges_.find(a, b);
      s = PairSlot{k, r, id};
    }
    return {s.rank, s.id};
  }

  struct Sym {
    int32_t c, prev, next, len;
  };
  struct Cand {
    int32_t rank, pos, new_id;
    bool operator<(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }  // min-heap
  };
  void add_merge(std::string_view a, std::string_view b, size_t r, const Where& w) {
    const int32_t ia = token_to_id(a), ib = token_to_id(b);
    if (ia < 0 || ib < 0) fail(w.at("merges").at(r), "names a token that is not in the vocabulary");
    std::string& merged = merged_buf_;  // reused: no allocation per merge
    merged.assign(a);
    merged += prefix_.size() && b.substr(0, prefix_.size()) == prefix_ ? b.substr(prefix_.size()) : b;
    const int32_t im = token_to_id(merged);
    if (im < 0) fail(w.at("merges").at(r), "gives '" + merged + "', which is not in the vocabulary");
    merges_.set(ia, ib, static_cast<int32_t>(r), im);  // a repeated pair: the last rank wins
  }

  void read_merges(const nlohmann::json& j, const Where& w, const RawModelParts& raw) {
    if (raw.merges_taken) {
      const size_t count = raw.merge_count();
      if (count > kMaxMerges) fail(w.at("merges"), "has " + std::to_string(count) + " merges (allowed at most " + std::to_string(kMaxMerges) + ")");
      merges_.reserve(count);
      const size_t n = raw.merges_bad >= 0 ? static_cast<size_t>(raw.merges_bad) : count;
      for (size_t r = 0; r < n; ++r) {
        const auto [a, b] = raw.merge(r);
        add_merge(a, b, r, w);
      }
      if (raw.merges_bad >= 0) {
        const Where at = w.at("merges").at(static_cast<size_t>(raw.merges_bad));
        if (!raw.merges_bad_text.empty()) fail(at, "'" + raw.merges_bad_text + "' is not two tokens separated by a space");
        fail(at, "is neither \"a b\" nor [\"a\", \"b\"]");
      }
      return;
    }
    const nlohmann::json* m = field(j, "merges");
    if (!m) return;
    if (!m->is_array()) fail(w.at("merges"), "is not an array");
    if (m->size() > kMaxMerges) fail(w.at("merges"), "has " + std::to_string(m->size()) + " merges (allowed at most " + std::to_string(kMaxMerges) + ")");
    merges_.reserve(m->size());
    for (size_t r = 0; r < m->size(); ++r) {
      const nlohmann::json& e = (*m)[r];
      if (e.is_string()) {
        const std::string& s = e.get_ref<const std::string&>();
        const size_t sp = s.find(' ', 1);
        if (sp == std::string::npos) fail(w.at("merges").at(r), "'" + s + "' is not two tokens separated by a space");
        add_merge(std::string_view(s).substr(0, sp), std::string_view(s).substr(sp + 1), r, w);
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        add_merge(e[0].get_ref<const std::string&>(), e[1].get_ref<const std::string&>(), r, w);
      } else {
        fail(w.at("merges").at(r), "is neither \"a b\" nor [\"a\", \"b\"]");
      }
    }
  }

  int32_t lookup_piece(std::string_view s, bool plain) const {
    if (plain) {
      size_t i = 0;
      const char32_t c = next_cp(s, i);
      if (i == s.size() && c < 512) return char_id_[c];
    }
    return token_to_id(s);
  }

  void merge_word(std::string_view w, std::vector<int32_t>& out) const {
    thread_local std::vector<Sym> syms;  // reused: no allocation per word
    syms.clear();
    const auto add = [&](int32_t id, int32_t len) {
      const int32_t n = static_cast<int32_t>(syms.size());
      syms.push_back(Sym{id, n - 1, n + 1, len});
    };
    int32_t unk_len = -1;  // a pending unk of this many bytes
    const bool plain = prefix_.empty() && suffix_.empty();
    std::string buf;
    for (size_t i = 0; i < w.size();) {
      const size_t n = cp_len_at(w, i);
      const bool first = i == 0, last = i + n == w.size();
      std::string_view s = w.substr(i, n);
      if (!plain && ((!first && !prefix_.empty()) || (last && !suffix_.empty()))) {
        buf.clear();
        if (!first) buf += prefix_;
        buf += s;
        if (last) buf += suffix_;
        s = buf;
      }
      i += n;
      const int32_t id = lookup_piece(s, plain);
      if (id >= 0) {
        if (unk_len >= 0) {
          add(unk_id_, unk_len);
          unk_len = -1;
        }
        add(id, static_cast<int32_t>(n));
        continue;
      }
      if (byte_fallback_) {
        bool all = true;
        for (unsigned char c : s) all = all && byte_id_[c] >= 0;
        if (all) {
          for (unsigned char c : s) add(byte_id_[c], 1);
          continue;
        }
      }
      if (unk_id_ >= 0) {
        if (unk_len >= 0 && fuse_unk_) {
          unk_len += static_cast<int32_t>(n);
        } else {
          if (unk_len >= 0) add(unk_id_, unk_len);
          unk_len = static_cast<int32_t>(n);
        }
      }
    }
    if (unk_len >= 0) add(unk_id_, unk_len);
    if (!syms.empty()) syms.back().next = -1;
    merge_all(syms);
    for (const Sym& s : syms)
      if (s.len > 0) out.push_back(s.c);
  }

  // Merges the lowest-ranked adjacent pair, leftmost on ties, until none is left: by scanning for
  // short words, with a heap of candidates (skipping stale ones) for long ones; the same order.
  void merge_all(std::vector<Sym>& syms) const {
    PairSlot* pc = caches().pairs.data();
    if (syms.size() <= kScanMergeMax) {
      merge_scan(syms, pc);
      return;
    }
    std::priority_queue<Cand> q;
    const int32_t n = static_cast<int32_t>(syms.size());
    for (int32_t k = 0; k + 1 < n; ++k) {
      const auto [rank, id] = find_pair(pc, syms[static_cast<size_t>(k)].c, syms[static_cast<size_t>(k) + 1].c);
      if (rank >= 0) q.push(Cand{rank, k, id});
    }
    while (!q.empty()) {
      const Cand top = q.top();
      q.pop();
      Sym& cur = syms[static_cast<size_t>(top.pos)];
      if (cur.len == 0 || cur.next < 0) continue;
      const int32_t next_pos = cur.next;
      const Sym right = syms[static_cast<size_t>(next_pos)];
      const auto [rank, id] = find_pair(pc, cur.c, right.c);
      if (rank < 0 || id != top.new_id) continue;
      cur.c = top.new_id;
      cur.len += right.len;
      cur.next = right.next;
      syms[static_cast<size_t>(next_pos)].len = 0;
      if (right.next >= 0 && right.next < n) syms[static_cast<size_t>(right.next)].prev = top.pos;
      if (cur.prev >= 0) {
        const auto [r2, id2] = find_pair(pc, syms[static_cast<size_t>(cur.prev)].c, cur.c);
        if (r2 >= 0) q.push(Cand{r2, cur.prev, id2});
      }
      if (cur.next >= 0 && cur.next < n) {
        const auto [r3, id3] = find_pair(pc, cur.c, syms[static_cast<size_t>(cur.next)].c);
        if (r3 >= 0) q.push(Cand{r3, top.pos, id3});
      }
    }
  }

  void merge_scan(std::vector<Sym>& syms, PairSlot* pc) const {
    // Compact ids; ranks of each adjacent pair cached and refreshed around each merge.
    int32_t ids[kScanMergeMax], ranks[kScanMergeMax], merged[kScanMergeMax];
    size_t n = 0;
    for (const Sym& s : syms) ids[n++] = s.c;
    const auto pair_at = [&](size_t k) {
      const auto [r, id] = find_pair(pc, ids[k], ids[k + 1]);
      ranks[k] = r;
      merged[k] = id;
    };
    for (size_t k = 0; k + 1 < n; ++k) pair_at(k);
    while (n > 1) {
      size_t best = n;
      for (size_t k = 0; k + 1 < n; ++k)
        if (ranks[k] >= 0 && (best == n || ranks[k] < ranks[best])) best = k;
      if (best == n) break;
      ids[best] = merged[best];
      for (size_t k = best + 1; k + 1 < n; ++k) {
        ids[k] = ids[k + 1];
        ranks[k] = ranks[k + 1];
        merged[k] = merged[k + 1];
      }
      --n;
      if (best > 0) pair_at(best - 1);
      if (best + 1 < n) pair_at(best);
    }
    syms.resize(n);
    for (size_t k = 0; k < n; ++k) syms[k] = Sym{ids[k], 0, 0, 1};
  }

  StringIds vocab_;
  std::vector<std::optional<std::string_view>> tokens_;
  int64_t size_ = 0;
  PairTable merges_;  // (a, b) → (rank, merged id)
  std::string merged_buf_;  // add_merge's scratch while loading
  bool byte_fallback_ = false, fuse_unk_ = false, ignore_merges_ = false;
  std::string prefix_, suffix_;
  int32_t unk_id_ = -1;
  int32_t byte_id_[256];
  std::vector<int32_t> char_id_;  // ids of the one-code-point tokens below U+0200 (plain words)
  const uint64_t instance_ = next_instance();
  static uint64_t next_instance() {
    static std::atomic<uint64_t> n{0};
    return ++n;
  }
  mutable std::mutex cache_mu_;
  mutable WordCache cache_{kCacheWords};
};

}  // namespace

std::unique_ptr<Model> make_bpe(const nlohmann::json& j, const Where& w, const RawModelParts& raw) {
  return std::make_unique<Bpe>(j, w, raw);
}

int32_t read_vocab_map(const nlohmann::json& j, const Where& w, const RawModelParts& raw, StringIds& ids) {
  int32_t max_id = -1;
  const auto add = [&](const std::string& key, int64_t id) {
    if (id < 0 || id >= static_cast<int64_t>(kMaxVocab))
      fail(w.at("vocab").at(key), "id " + std::to_string(id) + " is outside [0, " + std::to_string(kMaxVocab) + ")");
    ids.set(key, static_cast<int32_t>(id));
    max_id = std::max(max_id, static_cast<int32_t>(id));
  };
  if (raw.vocab_taken) {
    if (raw.vocab.size() > kMaxVocab) fail(w.at("vocab"), "has " + std::to_string(raw.vocab.size()) + " tokens (allowed at most " + std::to_string(kMaxVocab) + ")");
    size_t bytes = 0;
    for (const auto& [k, id] : raw.vocab) bytes += k.size();
    ids.reserve(raw.vocab.size(), bytes);
    for (const auto& [k, id] : raw.vocab) add(k, id);
    if (raw.vocab_bad) fail(w.at("vocab").at(raw.vocab_bad_key), "is not an integer id");
    return max_id;
  }
  const nlohmann::json* v = field(j, "vocab");
  if (!v || !v->is_object()) fail(w.at("vocab"), "is not an object {token: id}");
  if (v->size() > kMaxVocab) fail(w.at("vocab"), "has " + std::to_string(v->size()) + " tokens (allowed at most " + std::to_string(kMaxVocab) + ")");
  ids.reserve(v->size(), v->size() * 8);
  for (auto it = v->begin(); it != v->end(); ++it) {
    if (!it.value().is_number_integer()) fail(w.at("vocab").at(it.key()), "is not an integer id");
    add(it.key(), it.value().get<int64_t>());
  }
  return max_id;
}

std::vector<std::optional<std::string_view>> invert_vocab(const StringIds& ids, int32_t max_id) {
  std::vector<std::optional<std::string_view>> t(static_cast<size_t>(max_id + 1));
  ids.for_each([&](std::string_view key, int32_t id) { t[static_cast<size_t>(id)] = key; });
  return t;
}

}  // namespace hl::hf
