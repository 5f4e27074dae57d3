// What the ASan/UBSan lane (`ctest --preset asan`) found outside the file readers, kept as tests
// that fail (or time out) in any build when the bug comes back. Fuzz findings: test_fuzz_regressions.cpp.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>

#include "engine/core/thread_pool.h"

using hl::ThreadPool;

// A worker that checked the stop flag before reading the job generation could miss the
// destructor's wake-up and sleep forever: the process hung in ~ThreadPool at exit (seen under ASan,
// where the caller often runs a whole job before a worker wakes). Many short-lived pools, each with
// one job that the caller may finish alone, must all shut down.
TEST(ThreadPoolShutdown, ShortLivedPools_JobThenDestroy_NeverHang) {
  auto churn = std::async(std::launch::async, [] {
    for (int i = 0; i < 400; ++i) {
      ThreadPool pool(2);
      std::atomic<int64_t> covered{0};
      pool.parallel_for(4096, 1, [&](int64_t b, int64_t e) { covered.fetch_add(e - b); });
      if (covered.load() != 4096) return i;
    }
    return -1;
  });
  if (churn.wait_for(std::chrono::seconds(120)) != std::future_status::ready) {
    // The hung destructor cannot be interrupted; end the process so CTest reports it at once.
    std::fprintf(stderr, "ThreadPoolShutdown: a ThreadPool destructor did not return within 120 s\n");
    std::fflush(stderr);
    std::_Exit(1);
  }
  EXPECT_EQ(churn.get(), -1) << "a job did not cover [0, 4096)";
}
