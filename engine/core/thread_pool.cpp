// Persistent worker threads woken per parallel_for; the caller takes part 0 itself.
#include "engine/core/thread_pool.h"

#include <algorithm>
#include <cstdlib>

namespace hl {

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) {
    threads = static_cast<int>(std::thread::hardware_concurrency());
    if (const char* env = std::getenv("HL_THREADS")) threads = std::max(1, std::atoi(env));
  }
  threads = std::max(1, threads);
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_start_.notify_all();
  for (auto& t : workers_) t.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool;
  return pool;
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t)>* job;
    int64_t n, chunk;
    int parts;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_start_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = job_n_;
      chunk = job_chunk_;
      parts = job_parts_;
    }
    if (index < parts) {
      int64_t b = index * chunk, e = std::min(n, b + chunk);
      if (b < e) (*job)(b, e);
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (--pending_ == 0) cv_done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  int parts = static_cast<int>(std::min<int64_t>(size(), std::max<int64_t>(1, n / std::max<int64_t>(1, grain))));
  if (parts <= 1 || workers_.empty()) {
    fn(0, n);
    return;
  }
  int64_t chunk = (n + parts - 1) / parts;
  {
    std::lock_guard<std::mutex> lk(mu_);
    job_ = &fn;
    job_n_ = n;
    job_chunk_ = chunk;
    job_parts_ = parts;
    pending_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  cv_start_.notify_all();
  fn(0, std::min(n, chunk));
  std::unique_lock<std::mutex> lk(mu_);
  cv_done_.wait(lk, [&] { return pending_ == 0; });
}

}  // namespace hl
