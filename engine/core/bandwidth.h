// Measures this machine's memory read bandwidth the way `hybridlens bench` defines it
// (trace-format.md §4): all threads read a buffer at least 4× the last-level cache; best of a few passes.
#pragma once
#include <cstdint>

namespace hl {

uint64_t last_level_cache_bytes();  // from sysfs; 32 MiB if unknown
double measure_read_bandwidth_gb_s(int passes = 5);

}  // namespace hl
