// Flat hash tables of the tokenizer.json models (hf_model_*.cpp): token string → id over one byte
// arena (no allocation per token, so a 150k-token vocabulary loads fast) and token pair → (rank,
// merged id) for BPE merges, and the BPE word cache (word → ids), all open addressing with linear
// probing. Not thread-safe for writes (the vocabulary and merges are read-only after loading; the
// word cache is written under its owner's lock). Reference: Knuth, TAOCP vol. 3 §6.4 (open addressing).
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace hl::hf {

class StringIds {
 public:
  void reserve(size_t n, size_t bytes) {
    arena_.reserve(bytes);
    entries_.reserve(n);
    rehash(capacity_for(n));
  }
  size_t size() const { return entries_.size(); }
  // Adds or overwrites (the last value of a repeated key wins, as a JSON object read into a map).
  void set(std::string_view key, int32_t id) {
    if ((entries_.size() + 1) * 2 > slots_.size()) rehash(capacity_for(entries_.size() + 1));
    const size_t h = hash(key);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const int32_t e = slots_[i];
      if (e < 0) {
        slots_[i] = static_cast<int32_t>(entries_.size());
        entries_.push_back(Entry{static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(key.size()), id, h});
        arena_.append(key);
        return;
      }
      Entry& en = entries_[static_cast<size_t>(e)];
      if (en.hash == h && this->key(en) == key) {
        en.id = id;
        return;
      }
    }
  }
  int32_t find(std::string_view key) const {
    if (slots_.empty()) return -1;
    const size_t h = hash(key);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const int32_t e = slots_[i];
      if (e < 0) return -1;
      const Entry& en = entries_[static_cast<size_t>(e)];
      if (en.hash == h && this->key(en) == key) return en.id;
    }
  }
  template <class Fn>
  void for_each(Fn fn) const {
    for (const Entry& e : entries_) fn(key(e), e.id);
  }

 private:
  struct Entry {
    uint32_t off, len;
    int32_t id;
    size_t hash;
  };
  static size_t hash(std::string_view s) { return std::hash<std::string_view>{}(s); }
  static size_t capacity_for(size_t n) {
    size_t c = 16;
    while (c < n * 2 + 2) c <<= 1;
    return c;
  }
  std::string_view key(const Entry& e) const { return std::string_view(arena_).substr(e.off, e.len); }
  void rehash(size_t cap) {
    if (cap <= slots_.size()) return;
    slots_.assign(cap, -1);
    mask_ = cap - 1;
    for (size_t k = 0; k < entries_.size(); ++k)
      for (size_t i = entries_[k].hash & mask_;; i = (i + 1) & mask_)
        if (slots_[i] < 0) {
          slots_[i] = static_cast<int32_t>(k);
          break;
        }
  }
  std::string arena_;
  std::vector<Entry> entries_;
  std::vector<int32_t> slots_;
  size_t mask_ = 0;
};

// (left id, right id) → (rank, merged id).
class PairTable {
 public:
  void reserve(size_t n) {
    size_t c = 16;
    while (c < n * 2 + 2) c <<= 1;
    slots_.assign(c, Slot{kEmpty, 0, 0});
    mask_ = c - 1;
  }
  // Sets or overwrites; reserve() first with the number of pairs.
  void set(int32_t a, int32_t b, int32_t rank, int32_t id) {
    const uint64_t k = key(a, b);
    for (size_t i = mix(k) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].key == kEmpty || slots_[i].key == k) {
        slots_[i] = Slot{k, rank, id};
        return;
      }
    }
  }
  // Rank and merged id of the pair, or rank -1.
  std::pair<int32_t, int32_t> find(int32_t a, int32_t b) const {
    if (slots_.empty()) return {-1, -1};
    const uint64_t k = key(a, b);
    for (size_t i = mix(k) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == k) return {s.rank, s.id};
      if (s.key == kEmpty) return {-1, -1};
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Slot {
    uint64_t key;
    int32_t rank, id;
  };
  static uint64_t key(int32_t a, int32_t b) { return static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32 | static_cast<uint32_t>(b); }
  static size_t mix(uint64_t k) {  // splitmix64's finalizer: every key bit reaches the low bits
    k ^= k >> 30;
    k *= 0xBF58476D1CE4E5B9ull;
    k ^= k >> 27;
    k *= 0x94D049BB133111EBull;
    return static_cast<size_t>(k ^ (k >> 31));
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

// word → ids, the BPE word cache shared by threads (the caller locks): one open-addressing array
// of 24-byte slots over two arenas, so a word not seen before costs one probe run and no
// allocation, where a node-based map costs a chain of cache misses and three allocations. Emptied
// when `max_words` are in it (as the reference clears its cache when full).
class WordCache {
 public:
  // The slot array starts small and doubles up to twice max_words (a tokenizer that encodes
  // little costs little memory).
  explicit WordCache(size_t max_words) : max_(max_words) {}
  // Appends the cached ids of `word` (hash h) to out; false when it is not cached.
  bool get(std::string_view word, uint64_t h, std::vector<int32_t>& out) const {
    if (slots_.empty()) return false;
    h |= 1;
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.hash == 0) return false;
      if (s.hash == h && s.key_len == word.size() && std::string_view(keys_).substr(s.key_off, s.key_len) == word) {
        out.insert(out.end(), ids_.begin() + s.ids_off, ids_.begin() + s.ids_off + s.n);
        return true;
      }
    }
  }
  // word.size() and ids.size() below 65536 (the caller caches words of at most 256 bytes).
  void put(std::string_view word, uint64_t h, const int32_t* ids, size_t n) {
    if (count_ >= max_) {
      std::fill(slots_.begin(), slots_.end(), Slot{});
      keys_.clear();
      ids_.clear();
      count_ = 0;
    }
    if ((count_ + 1) * 2 > slots_.size()) grow();
    h |= 1;
    size_t i = h & mask_;
    while (slots_[i].hash != 0) i = (i + 1) & mask_;
    slots_[i] = Slot{h, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(ids_.size()),
                     static_cast<uint16_t>(word.size()), static_cast<uint16_t>(n)};
    keys_.append(word);
    ids_.insert(ids_.end(), ids, ids + n);
    ++count_;
  }

 private:
  struct Slot {
    uint64_t hash = 0;  // hash | 1; 0: empty
    uint32_t key_off = 0, ids_off = 0;
    uint16_t key_len = 0, n = 0;
  };
  void grow() {
    std::vector<Slot> old(std::max<size_t>(slots_.size() * 2, 1024), Slot{});
    old.swap(slots_);
    mask_ = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.hash == 0) continue;
      size_t i = s.hash & mask_;
      while (slots_[i].hash != 0) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }
  size_t max_, count_ = 0, mask_ = 0;
  std::vector<Slot> slots_;
  std::string keys_;
  std::vector<int32_t> ids_;
};

// model.vocab (an object) and model.merges taken out of the JSON while it is parsed
// (hf_reader.cpp), so large vocabularies skip the generic JSON tree.
struct RawModelParts {
  bool vocab_taken = false;
  std::vector<std::pair<std::string, int64_t>> vocab;
  std::string vocab_bad_key;  // the first key whose value is not an integer
  bool vocab_bad = false;
  bool merges_taken = false;
  // The merges' two tokens, packed one after another in merge_bytes (no allocation per merge):
  // merge r is [merge_ends[2r-1], merge_ends[2r]) and [merge_ends[2r], merge_ends[2r+1]).
  std::string merge_bytes;
  std::vector<uint32_t> merge_ends;
  size_t merge_count() const { return merge_ends.size() / 2; }
  std::pair<std::string_view, std::string_view> merge(size_t r) const {
    const size_t a = r ? merge_ends[2 * r - 1] : 0, m = merge_ends[2 * r], b = merge_ends[2 * r + 1];
    const std::string_view all(merge_bytes);
    return {all.substr(a, m - a), all.substr(m, b - m)};
  }
  void add_merge(std::string_view a, std::string_view b) {
    merge_bytes.append(a);
    merge_ends.push_back(static_cast<uint32_t>(merge_bytes.size()));
    merge_bytes.append(b);
    merge_ends.push_back(static_cast<uint32_t>(merge_bytes.size()));
  }
  int64_t merges_bad = -1;    // index of the first malformed entry
  std::string merges_bad_text;  // that entry when it was a string without a separating space
};

}  // namespace hl::hf
