// RecordList: the per-token records of a run, each held once on the heap as an immutable shared
// TokenTrace (issue 17 item 2, after the append-only event storage of Tracy's Worker). Copying a
// Run copies T pointers, not the O(T²) attention rows: the engine's recorder, the app's recording,
// the views and the autosave share one copy. Not a general container: reading is const only;
// edit(t) copies a record that someone else still holds first, so a shared record never changes.
#pragma once
#include <cstddef>
#include <iterator>
#include <memory>
#include <utility>
#include <vector>

#include "engine/model/token_trace.h"

namespace hl {

class RecordList {
 public:
  using Ptr = std::shared_ptr<const TokenTrace>;

  RecordList() = default;
  RecordList(std::vector<TokenTrace>&& v) {  // NOLINT: implicit, as a run's records were a vector
    p_.reserve(v.size());
    for (TokenTrace& r : v) p_.push_back(std::make_shared<TokenTrace>(std::move(r)));
  }

  size_t size() const { return p_.size(); }
  bool empty() const { return p_.empty(); }
  void reserve(size_t n) { p_.reserve(n); }
  void clear() { p_.clear(); }
  void pop_back() { p_.pop_back(); }
  // Shrinking drops records; growing appends default (zero) records.
  void resize(size_t n) {
    if (n <= p_.size()) {
      p_.resize(n);
      return;
    }
    p_.reserve(n);
    while (p_.size() < n) p_.push_back(std::make_shared<TokenTrace>());
  }

  void push_back(TokenTrace&& r) { p_.push_back(std::make_shared<TokenTrace>(std::move(r))); }
  void push_back(const TokenTrace& r) { p_.push_back(std::make_shared<TokenTrace>(r)); }
  void push_back(Ptr r) { p_.push_back(std::const_pointer_cast<TokenTrace>(std::move(r))); }

  const TokenTrace& operator[](size_t t) const { return *p_[t]; }
  const TokenTrace& back() const { return *p_.back(); }
  // Record t for writing (tests, readers filling a run): copied first when it is shared.
  TokenTrace& edit(size_t t) {
    std::shared_ptr<TokenTrace>& p = p_[t];
    if (p.use_count() != 1) p = std::make_shared<TokenTrace>(*p);
    return *p;
  }
  // A deep copy as a plain vector (the engine's trace writer takes one).
  std::vector<TokenTrace> to_vector() const {
    std::vector<TokenTrace> v;
    v.reserve(p_.size());
    for (const auto& p : p_) v.push_back(*p);
    return v;
  }
  // The shared record t (for handing it to another thread or run without a copy).
  Ptr ptr(size_t t) const { return p_[t]; }
  // How many holders record t has (this list included): 1 when nothing else shares it.
  long holders(size_t t) const { return p_[t].use_count(); }

  class const_iterator {
   public:
    using iterator_category = std::random_access_iterator_tag;
    using value_type = TokenTrace;
    using difference_type = std::ptrdiff_t;
    using reference = const TokenTrace&;
    using pointer = const TokenTrace*;
    const_iterator() = default;
    const_iterator(const RecordList* l, size_t i) : l_(l), i_(i) {}
    reference operator*() const { return (*l_)[i_]; }
    pointer operator->() const { return &(*l_)[i_]; }
    reference operator[](difference_type d) const { return (*l_)[i_ + d]; }
    const_iterator& operator++() { return ++i_, *this; }
    const_iterator operator++(int) { return const_iterator(l_, i_++); }
    const_iterator& operator--() { return --i_, *this; }
    const_iterator operator--(int) { return const_iterator(l_, i_--); }
    const_iterator& operator+=(difference_type d) { return i_ += d, *this; }
    const_iterator& operator-=(difference_type d) { return i_ -= d, *this; }
    const_iterator operator+(difference_type d) const { return const_iterator(l_, i_ + d); }
    const_iterator operator-(difference_type d) const { return const_iterator(l_, i_ - d); }
    difference_type operator-(const const_iterator& o) const {
      return static_cast<difference_type>(i_) - static_cast<difference_type>(o.i_);
    }
    bool operator==(const const_iterator& o) const { return i_ == o.i_; }
    bool operator!=(const const_iterator& o) const { return i_ != o.i_; }
    bool operator<(const const_iterator& o) const { return i_ < o.i_; }

   private:
    const RecordList* l_ = nullptr;
    size_t i_ = 0;
  };
  using iterator = const_iterator;  // records are read through the list, written with edit()
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, p_.size()}; }
  std::reverse_iterator<const_iterator> rbegin() const { return std::reverse_iterator<const_iterator>(end()); }
  std::reverse_iterator<const_iterator> rend() const { return std::reverse_iterator<const_iterator>(begin()); }

 private:
  std::vector<std::shared_ptr<TokenTrace>> p_;
};

}  // namespace hl
