// Available memory (see sys_memory.h): parses /proc/self/cgroup to find this process's cgroup, then
// the limit files of cgroup v2 (walking up to the root, since a parent's memory.max binds too) and
// v1, and /proc/meminfo. Reference: Linux Documentation/admin-guide/cgroup-v2.rst (memory.max,
// memory.current), cgroup-v1/memory.rst (memory.limit_in_bytes, memory.usage_in_bytes), proc(5).
#include "engine/core/sys_memory.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

namespace hl {

namespace {

// The first line of a small file, or "" when it cannot be read.
std::string first_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  if (f) std::getline(f, line);
  return line;
}

// A decimal byte count ("max" and anything else not a number: false).
bool parse_u64(const std::string& s, uint64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

// A "Key:   1234 kB" entry of proc/meminfo in bytes, or false.
bool meminfo_bytes(const std::string& root, const std::string& key, uint64_t* out) {
  std::ifstream f(root + "/proc/meminfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.compare(0, key.size() + 1, key + ":") != 0) continue;
    std::istringstream in(line.substr(key.size() + 1));
    std::string num, unit;
    in >> num >> unit;
    uint64_t v = 0;
    if (!parse_u64(num, &v)) return false;
    const uint64_t scale = unit == "kB" ? 1024 : 1;
    if (v > UINT64_MAX / scale) return false;
    *out = v * scale;
    return true;
  }
  return false;
}

// The cgroup path of this process for a hierarchy: v2 ("0::/path") when controller is empty, else the
// v1 line listing the controller ("4:memory:/path"). "" when absent.
std::string cgroup_path(const std::string& root, const std::string& controller) {
  std::ifstream f(root + "/proc/self/cgroup");
  std::string line;
  while (std::getline(f, line)) {
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string ctl = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controller.empty() ? (line.compare(0, a, "0") == 0 && ctl.empty())
                           : (',' + ctl + ',').find(',' + controller + ',') != std::string::npos)
      return path.empty() ? "/" : path;
  }
  return "";
}

// limit − usage in the folder when both files hold numbers (a limit of "max" is no limit).
bool headroom(const std::string& dir, const char* limit_file, const char* usage_file, uint64_t* out) {
  uint64_t lim = 0, use = 0;
  if (!parse_u64(first_line(dir + "/" + limit_file), &lim)) return false;
  if (!parse_u64(first_line(dir + "/" + usage_file), &use)) use = 0;
  *out = lim > use ? lim - use : 0;
  return true;
}

std::string& test_root() {
  static std::string root;
  return root;
}

void take(uint64_t bytes, const char* source, AvailableMemory* m) {
  if (m->source.empty() || bytes < m->bytes) {
    m->bytes = bytes;
    m->source = source;
  }
}

}  // namespace

void set_memory_root_for_tests(const std::string& root) {
  test_root() = root;
}

uint64_t physical_memory(const std::string& root_in) {
  const std::string& root = root_in.empty() ? test_root() : root_in;
  uint64_t total = 0;
  if (meminfo_bytes(root, "MemTotal", &total) && total > 0) return total;
  if (!root.empty()) return 0;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

int64_t resident_memory() {
  std::ifstream f("/proc/self/statm");  // pages: total program size, then resident (proc(5))
  long long size = 0, resident = 0;
  if (!(f >> size >> resident)) return -1;
  const long page = ::sysconf(_SC_PAGESIZE);
  return page > 0 ? resident * static_cast<int64_t>(page) : -1;
}

AvailableMemory available_memory(const std::string& root_in) {
  const std::string& root = root_in.empty() ? test_root() : root_in;
  AvailableMemory m;
  const uint64_t ram = physical_memory(root);
  if (ram > 0) take(ram, "physical RAM", &m);
  uint64_t v = 0;
  if (meminfo_bytes(root, "MemAvailable", &v)) take(v, "MemAvailable", &m);
  // cgroup v2: this cgroup and every parent up to the mount point.
  const std::string v2 = cgroup_path(root, "");
  if (!v2.empty()) {
    std::string p = v2;
    while (true) {
      const std::string dir = root + "/sys/fs/cgroup" + (p == "/" ? "" : p);
      if (headroom(dir, "memory.max", "memory.current", &v)) take(v, "cgroup memory.max", &m);
      if (p == "/" || p.empty()) break;
      const size_t slash = p.rfind('/');
      p = slash == 0 || slash == std::string::npos ? "/" : p.substr(0, slash);
    }
  }
  // cgroup v1: the memory controller's folder (inside a container the path may not exist: the mount root).
  const std::string v1 = cgroup_path(root, "memory");
  if (!v1.empty()) {
    const std::string base = root + "/sys/fs/cgroup/memory";
    if (headroom(base + (v1 == "/" ? "" : v1), "memory.limit_in_bytes", "memory.usage_in_bytes", &v) ||
        headroom(base, "memory.limit_in_bytes", "memory.usage_in_bytes", &v))
      take(v, "cgroup memory.limit_in_bytes", &m);  // "unlimited" (2^63 − page) never wins over RAM
  }
  if (m.source.empty()) {
    m.bytes = UINT64_MAX;
    m.source = "unknown (no limit could be read)";
  }
  return m;
}

std::string describe(const AvailableMemory& m) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f GB available", static_cast<double>(m.bytes) / 1e9);
  return std::string(buf) + " (" + m.source + ")";
}

}  // namespace hl
