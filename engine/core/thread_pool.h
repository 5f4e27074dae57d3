// A small persistent thread pool for data-parallel loops in the CPU backend (parallel_for over
// rows of a matrix). Not a task scheduler: one parallel_for runs at a time per pool (a nested or
// concurrent call runs on its caller alone). Workers spin briefly between jobs, so the many short
// jobs of a decode step cost a cache-line handoff, not a futex wake; then they sleep. Each thread
// starts on its own contiguous share of a job, claiming from a counter in its own cache line, and
// then takes what is left of the others' shares: on a quiet machine a job costs each thread one
// handoff and one count, and a descheduled thread's share is still finished by the rest.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace hl {

class ThreadPool {
 public:
  explicit ThreadPool(int threads = 0);  // 0: std::thread::hardware_concurrency() (or $HL_THREADS)
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // Calls fn(begin, end) on disjoint chunks covering [0, n); returns when all are done. Chunks are
  // at least `grain` long, begin at multiples of it and are handed out dynamically (a thread may
  // get several); small loops run on the calling thread alone. fn is borrowed, never copied: no
  // allocation per call. An exception thrown by fn on any thread is rethrown here after every
  // chunk has finished.
  template <class F>
  void parallel_for(int64_t n, int64_t grain, F&& fn) {
    using Fn = std::remove_reference_t<F>;
    run(
        n, grain, [](void* ctx, int64_t b, int64_t e) { (*static_cast<Fn*>(ctx))(b, e); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }

  // 0 on the calling (non-worker) thread, 1 .. size()-1 on this pool's workers: an index into
  // per-thread scratch owned by the caller of parallel_for.
  static int thread_index();

  static ThreadPool& global();

 private:
  using Thunk = void (*)(void* ctx, int64_t begin, int64_t end);
  void run(int64_t n, int64_t grain, Thunk thunk, void* ctx);
  void worker_loop(int index);
  // Runs pieces of job generation `gen` until none is left: its own share first, then the others'.
  void work(uint32_t gen);

  // One thread's share of the current job: cursor = generation (32 bits) | end (16) | next piece to
  // claim (16). Pieces are claimed by CAS only while the generation matches, so a late worker never
  // runs a stale job. Own cache line each, so claiming within one's share stays in one core's cache.
  struct alignas(64) Share {
    std::atomic<uint64_t> cursor{0};
  };

  // state_ = generation (32 bits) | number of shares (16): published last, read first.
  std::atomic<uint64_t> state_{0};
  std::atomic<int64_t> done_{0};  // pieces finished in the current job, added once per thread and job
  std::vector<Share> shares_;     // size() entries; the first `number of shares` belong to the job
  std::atomic<int> sleepers_{0};
  std::atomic<bool> busy_{false};
  std::atomic<bool> stop_{false};
  // The current job, written before its generation is published, read after a piece is claimed.
  Thunk thunk_ = nullptr;
  void* ctx_ = nullptr;
  int64_t n_ = 0, piece_ = 0;
  uint32_t npieces_ = 0;  // the last piece ends at n_
  int64_t spin_ns_ = 0;   // how long an idle worker spins before sleeping
  std::vector<std::thread> workers_;
  std::mutex error_mu_;
  std::exception_ptr error_;  // the first exception of the current job
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace hl
