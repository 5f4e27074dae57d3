// Persistent worker threads (see thread_pool.h). A job is published by bumping the generation in
// one atomic word; idle workers spin on it for spin_ns_ (default 200 µs, $HL_SPIN_US) and then sleep
// on a condition variable, which the caller only signals when someone sleeps (Dekker handshake on
// sleepers_). The job is cut into pieces of at least `grain` and the pieces into one contiguous
// share per thread. A thread claims from its own share (a cursor in its own cache line) a third of
// what is left, at least one piece, so a share goes in a few long calls and ends in single pieces;
// then it claims what is left of the other shares. A descheduled thread on a busy machine holds up
// what it has claimed, never its whole share. The caller takes part in its own job (share 0) and
// each thread adds its count of finished pieces once.
//
// Why shares: with one shared cursor and one shared done-counter (the design before), every chunk
// moved two cache lines between the cores, and a job of a decode step is a few microseconds. On the
// 2-core development VM the ~317M model's Q8_0 + head decode went from 186-198 to 220-236 tok/s
// when each thread took one chunk instead of eight, BF16 unchanged (bench --weights
// as-stored,q8_0+head,q4_k+head, the variants in turn; quantization.md, Speed). Shares keep the
// dynamic balance without that traffic and give each thread one ascending stream through a matrix.
#include "engine/core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace hl {
namespace {

thread_local int t_index = 0;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

constexpr uint32_t gen_of(uint64_t s) {
  return static_cast<uint32_t>(s >> 32);
}
// state_: the number of shares; a share's cursor: the end of its pieces.
constexpr uint32_t mid_of(uint64_t s) {
  return static_cast<uint32_t>((s >> 16) & 0xffff);
}
constexpr uint32_t next_of(uint64_t s) {
  return static_cast<uint32_t>(s & 0xffff);
}
constexpr uint64_t pack(uint32_t gen, uint32_t mid, uint32_t next) {
  return (static_cast<uint64_t>(gen) << 32) | (static_cast<uint64_t>(mid) << 16) | next;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) {
    threads = static_cast<int>(std::thread::hardware_concurrency());
    if (const char* env = std::getenv("HL_THREADS")) threads = std::max(1, std::atoi(env));
  }
  threads = std::min(std::max(1, threads), 1024);
  spin_ns_ = 200000;
  if (const char* env = std::getenv("HL_SPIN_US")) spin_ns_ = std::max(0, std::atoi(env)) * 1000ll;
  shares_ = std::vector<Share>(static_cast<size_t>(threads));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_.store(true);
    state_.fetch_add(uint64_t{1} << 32);  // wake spinners too
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool;
  return pool;
}

int ThreadPool::thread_index() {
  return t_index;
}

void ThreadPool::work(uint32_t gen) {
  const uint64_t st = state_.load(std::memory_order_acquire);
  if (gen_of(st) != gen) return;  // a newer job is out: this one is done
  const uint32_t nshares = mid_of(st);
  int64_t ran = 0;
  for (uint32_t i = 0; i < nshares; ++i) {
    Share& sh = shares_[(static_cast<uint32_t>(t_index) + i) % nshares];
    uint64_t c = sh.cursor.load(std::memory_order_acquire);
    for (;;) {
      if (gen_of(c) != gen || next_of(c) >= mid_of(c)) break;
      // A third of what is left of the share, at least one piece: few calls while a share is long,
      // single pieces at its end, so the threads finish within about one piece of each other.
      const uint32_t take = std::max<uint32_t>(1, (mid_of(c) - next_of(c) + 2) / 3);
      if (!sh.cursor.compare_exchange_weak(c, c + take, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
      // Pieces [next_of(c), next_of(c) + take) are ours; the job fields stay valid until done_ counts them.
      const int64_t b = static_cast<int64_t>(next_of(c)) * piece_;
      const int64_t e = next_of(c) + take == mid_of(c) && mid_of(c) == npieces_ ? n_ : b + take * piece_;
      try {
        thunk_(ctx_, b, e);
      } catch (...) {  // handed to the caller, which rethrows once every piece is done
        std::lock_guard<std::mutex> lk(error_mu_);
        if (!error_) error_ = std::current_exception();
      }
      ran += take;
      c = sh.cursor.load(std::memory_order_acquire);
    }
  }
  // Once per thread and job: the job cannot end before this add, so done_ is still this job's.
  if (ran > 0) done_.fetch_add(ran, std::memory_order_acq_rel);
}

void ThreadPool::worker_loop(int index) {
  t_index = index;
  // A worker that starts late may take the generation of a job already done, or of the destructor's
  // wake-up itself: so stop_ (set under mu_ before that wake-up) ends every wait, not only a new
  // generation.
  uint32_t seen = gen_of(state_.load());
  for (;;) {
    // Spin (pause) for ~20 µs, then keep polling with sched_yield until spin_ns_ (so on an
    // oversubscribed machine the caller's thread gets the core), then sleep until the generation moves.
    const int64_t t0 = now_ns();
    int spins = 0;
    while (gen_of(state_.load(std::memory_order_acquire)) == seen && !stop_.load(std::memory_order_relaxed)) {
      if (++spins % 64 != 0) {
        cpu_relax();
        continue;
      }
      const int64_t waited = now_ns() - t0;
      if (waited < std::min<int64_t>(20000, spin_ns_)) continue;
      if (waited < spin_ns_) {
        std::this_thread::yield();
        continue;
      }
      std::unique_lock<std::mutex> lk(mu_);
      sleepers_.fetch_add(1);  // seq_cst: pairs with the caller's store then load
      cv_.wait(lk, [&] { return stop_.load() || gen_of(state_.load()) != seen; });
      sleepers_.fetch_sub(1);
      break;
    }
    // Read the generation before the stop flag: the destructor sets stop_ and then bumps the
    // generation, so a worker that sees stop_ false here has a `seen` older than that bump and will
    // wake for it. (The other order lost the wake-up: the process hung in ~ThreadPool at exit.)
    seen = gen_of(state_.load(std::memory_order_acquire));
    if (stop_.load()) return;
    work(seen);
  }
}

void ThreadPool::run(int64_t n, int64_t grain, Thunk thunk, void* ctx) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t parts = std::min<int64_t>(size(), n / grain);
  if (parts <= 1 || workers_.empty() || busy_.exchange(true, std::memory_order_acquire)) {
    thunk(ctx, 0, n);  // small, nested or concurrent: on this thread alone
    return;
  }
  // Pieces of a multiple of `grain` (at most 65535 of them; the last one also takes the rest), cut
  // into one share per thread. Every boundary of a call is a multiple of the grain whichever thread
  // claims what, so the bounds a kernel sees do not depend on timing.
  piece_ = grain * ((n / grain + 0xfffe) / 0xffff);
  const uint32_t npieces = static_cast<uint32_t>(n / piece_);
  thunk_ = thunk;
  ctx_ = ctx;
  n_ = n;
  npieces_ = npieces;
  done_.store(0, std::memory_order_relaxed);
  const uint32_t gen = gen_of(state_.load(std::memory_order_relaxed)) + 1;
  // Share p: pieces [p·npieces/parts, (p+1)·npieces/parts), for thread p first (the caller is 0).
  const uint32_t nshares = static_cast<uint32_t>(parts);
  for (uint32_t p = 0; p < nshares; ++p)
    shares_[p].cursor.store(pack(gen, static_cast<uint32_t>(uint64_t{p + 1} * npieces / nshares),
                                 static_cast<uint32_t>(uint64_t{p} * npieces / nshares)),
                            std::memory_order_relaxed);
  state_.store(pack(gen, nshares, 0));  // seq_cst: publishes the job fields and shares above
  if (sleepers_.load() > 0) {
    { std::lock_guard<std::mutex> lk(mu_); }  // a worker between its check and its wait is now waiting
    cv_.notify_all();
  }
  work(gen);
  int spins = 0;
  while (done_.load(std::memory_order_acquire) < static_cast<int64_t>(npieces)) {
    if (++spins < 4096)
      cpu_relax();
    else
      std::this_thread::yield();  // the worker holding the last piece was probably descheduled
  }
  busy_.store(false, std::memory_order_release);
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

}  // namespace hl
