// Persistent worker threads (see thread_pool.h). A job is published by bumping the generation in
// one atomic word; idle workers spin on it for spin_ns_ (default 200 µs, $HL_SPIN_US) and then sleep
// on a condition variable, which the caller only signals when someone sleeps (Dekker handshake on
// sleepers_). Chunks are claimed dynamically, so a descheduled thread on a busy machine holds up
// one chunk, not a fixed share. The caller takes part in its own job.
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
constexpr uint32_t chunks_of(uint64_t s) {
  return static_cast<uint32_t>((s >> 16) & 0xffff);
}
constexpr uint32_t next_of(uint64_t s) {
  return static_cast<uint32_t>(s & 0xffff);
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
  uint64_t s = state_.load(std::memory_order_acquire);
  for (;;) {
    if (gen_of(s) != gen || next_of(s) >= chunks_of(s)) return;
    if (!state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
    // Chunk next_of(s) is ours; the job fields stay valid until done_ counts it.
    const int64_t b = static_cast<int64_t>(next_of(s)) * chunk_;
    const int64_t e = std::min(n_, b + chunk_);
    try {
      thunk_(ctx_, b, e);
    } catch (...) {  // handed to the caller, which rethrows once every chunk is done
      std::lock_guard<std::mutex> lk(error_mu_);
      if (!error_) error_ = std::current_exception();
    }
    done_.fetch_add(1, std::memory_order_acq_rel);
    s = state_.load(std::memory_order_acquire);
  }
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
  // Up to eight chunks per thread, each at least `grain` long: when the last chunk is claimed, the
  // others are busy for at most one chunk, so the tail where threads idle stays short.
  const int64_t nchunks_wanted = std::min<int64_t>({n / grain, parts * 8, 0xffff});
  chunk_ = (n + nchunks_wanted - 1) / nchunks_wanted;
  const uint32_t nchunks = static_cast<uint32_t>((n + chunk_ - 1) / chunk_);
  thunk_ = thunk;
  ctx_ = ctx;
  n_ = n;
  done_.store(0, std::memory_order_relaxed);
  const uint32_t gen = gen_of(state_.load(std::memory_order_relaxed)) + 1;
  state_.store((static_cast<uint64_t>(gen) << 32) | (static_cast<uint64_t>(nchunks) << 16));  // seq_cst
  if (sleepers_.load() > 0) {
    { std::lock_guard<std::mutex> lk(mu_); }  // a worker between its check and its wait is now waiting
    cv_.notify_all();
  }
  work(gen);
  int spins = 0;
  while (done_.load(std::memory_order_acquire) < static_cast<int64_t>(nchunks)) {
    if (++spins < 4096)
      cpu_relax();
    else
      std::this_thread::yield();  // the worker holding the last chunk was probably descheduled
  }
  busy_.store(false, std::memory_order_release);
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

}  // namespace hl
