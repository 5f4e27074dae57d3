// Read-bandwidth probe (see bandwidth.h): a streaming sum over a buffer ≥ 4× the LLC, split over the
// thread pool in blocks of 512 KiB, prefetching ahead as the decode kernels do, so the figure is what
// a memory-bound decode step could reach.
#include "engine/core/bandwidth.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "engine/core/thread_pool.h"

namespace hl {

uint64_t last_level_cache_bytes() {
  uint64_t best = 0;
  for (int idx = 0; idx < 8; ++idx) {
    std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(idx) + "/size");
    std::string s;
    if (!(in >> s) || s.empty()) continue;
    uint64_t mult = 1;
    if (s.back() == 'K') mult = 1024;
    if (s.back() == 'M') mult = 1024 * 1024;
    if (mult != 1) s.pop_back();
    try {
      best = std::max<uint64_t>(best, std::stoull(s) * mult);
    } catch (...) {
    }
  }
  return best ? best : 32ull << 20;
}

namespace {
uint64_t probe_bytes() { return std::max<uint64_t>(4 * last_level_cache_bytes(), 256ull << 20) / 8 * 8; }
}  // namespace

BandwidthProbe::BandwidthProbe() : buf_(probe_bytes(), "the bandwidth probe") {
  uint64_t* buf = reinterpret_cast<uint64_t*>(buf_.data());
  ThreadPool::global().parallel_for(n(), 1 << 16, [&](int64_t b, int64_t e) {  // first touch by the readers
    for (int64_t i = b; i < e; ++i) buf[i] = static_cast<uint64_t>(i);
  });
}

double BandwidthProbe::pass() {
  const int64_t n = this->n();
  constexpr int64_t kBlock = 1 << 16;  // elements per block; one partial sum per block
  constexpr int64_t kAhead = 4096 / sizeof(uint64_t);  // as cpu_simd_impl.h's kAhead
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<uint64_t> partial(static_cast<size_t>(blocks), 0);
  const uint64_t* buf = reinterpret_cast<const uint64_t*>(buf_.data());
  const auto t0 = std::chrono::steady_clock::now();
  ThreadPool::global().parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      const int64_t e = std::min(n, (b + 1) * kBlock);
      int64_t i = b * kBlock;
      for (; i + 8 <= e; i += 8) {  // one 64-byte line, with the decode kernels' software prefetch
        __builtin_prefetch(buf + i + kAhead);
        s0 += buf[i] + buf[i + 4];
        s1 += buf[i + 1] + buf[i + 5];
        s2 += buf[i + 2] + buf[i + 6];
        s3 += buf[i + 3] + buf[i + 7];
      }
      for (; i < e; ++i) s0 += buf[i];
      partial[static_cast<size_t>(b)] = s0 + s1 + s2 + s3;
    }
  });
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  volatile uint64_t sink = 0;
  for (uint64_t v : partial) sink = sink + v;
  return static_cast<double>(bytes()) / dt / 1e9;
}

double measure_read_bandwidth_gb_s(int passes) {
  BandwidthProbe probe;
  double best = 0;
  for (int p = 0; p < passes; ++p) best = std::max(best, probe.pass());
  return best;
}

}  // namespace hl
