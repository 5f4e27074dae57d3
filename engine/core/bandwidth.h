// Measures this machine's memory read bandwidth the way `hybridlens bench` defines it
// (trace-format.md §4): all threads read a buffer at least 4× the last-level cache. A probe owns its
// buffer, so a benchmark can interleave single passes with the work it compares against them.
#pragma once
#include <cstdint>

#include "engine/core/anon_buffer.h"

namespace hl {

uint64_t last_level_cache_bytes();  // from sysfs; 32 MiB if unknown

class BandwidthProbe {
 public:
  BandwidthProbe();  // allocates and first-touches max(4 × LLC, 256 MiB) on the pool
  double pass();     // GB/s of one full read of the buffer by all pool threads
  uint64_t bytes() const { return static_cast<uint64_t>(n()) * sizeof(uint64_t); }

 private:
  int64_t n() const { return static_cast<int64_t>(buf_.size() / sizeof(uint64_t)); }  // uint64_t elements
  AnonBuffer buf_;  // the memory the weights live in (anon_buffer.h): huge pages where offered
};

double measure_read_bandwidth_gb_s(int passes = 5);  // best of `passes` passes of a fresh probe

}  // namespace hl
