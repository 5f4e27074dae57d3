// How much memory this process may still allocate: the one place every pre-allocation check asks
// (model load, adapter merge, checkpoint generation, session and trace import). Not a tracker of
// our own use. Limits read: cgroup v2 memory.max − memory.current (this cgroup and its parents),
// cgroup v1 memory.limit_in_bytes − usage, /proc/meminfo MemAvailable, physical RAM (Linux proc(5)).
#pragma once
#include <cstdint>
#include <string>

namespace hl {

struct AvailableMemory {
  uint64_t bytes = 0;  // the smallest of the limits below that could be read
  std::string source;  // which one: "cgroup memory.max", "cgroup memory.limit_in_bytes", "MemAvailable", "physical RAM"
};

// root: "" for this machine; tests pass a folder laid out like / (proc/self/cgroup, proc/meminfo,
// sys/fs/cgroup/...) holding fake files. A limit whose files are missing or unreadable is skipped;
// when none can be read the result is physical RAM from sysconf.
AvailableMemory available_memory(const std::string& root = "");

// Tests only: the root that available_memory("") and physical_memory("") read from ("" = this
// machine), so a whole load can be run against a fake cgroup. Not thread-safe; set before loading.
void set_memory_root_for_tests(const std::string& root);

// Physical RAM (MemTotal of proc/meminfo under root, else sysconf); what a status bar shows as the
// machine's memory. 0 when unknown.
uint64_t physical_memory(const std::string& root = "");

// This process's resident set size in bytes (/proc/self/statm), -1 when unreadable: what the
// status bar and the soak test show, never a pre-allocation check (those ask available_memory).
int64_t resident_memory();

// "5.20 GB available (cgroup memory.max)": the words every refusal message uses.
std::string describe(const AvailableMemory& m);

}  // namespace hl
