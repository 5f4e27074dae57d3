// Available memory (engine/core/sys_memory.h, issue 18 item 2 / issue 14 item 7): the smallest of
// cgroup v2 memory.max − memory.current (this cgroup or a parent), cgroup v1 limit − usage,
// MemAvailable and physical RAM, read from fake /proc and /sys trees; and the pre-allocation checks
// of the session reader, the trace importer and the model loader refusing with the limit they used.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/sys_memory.h"
#include "engine/model/loader.h"
#include "sessions/session_file.h"
#include "sessions/trace_import.h"
#include "tests/engine/session_test_util.h"
#include "tests/engine/test_util.h"

namespace hl::test {
namespace {

namespace fs = std::filesystem;

// A fake root: files such as proc/meminfo, proc/self/cgroup and sys/fs/cgroup/... under a temporary folder.
struct FakeRoot {
  TempDir dir;
  void file(const std::string& rel, const std::string& text) {
    fs::create_directories(fs::path(dir.path + "/" + rel).parent_path());
    write_text(dir.path + "/" + rel, text);
  }
};

constexpr uint64_t kGB = 1000000000;

// One fake machine per row: its files (path → text) and the limit that must apply.
struct Limits {
  const char* machine;
  std::vector<std::pair<std::string, std::string>> files;
  uint64_t bytes;
  const char* source;
};

TEST(SysMemory, Table_TheSmallestReadableLimitApplies) {
  const auto meminfo = [](uint64_t total_kb, uint64_t avail_kb) {
    return std::pair<std::string, std::string>{
        "proc/meminfo", "MemTotal:       " + std::to_string(total_kb) + " kB\nMemFree:          1000 kB\n" +
                            "MemAvailable:   " + std::to_string(avail_kb) + " kB\nBuffers:  5 kB\n"};
  };
  const std::vector<Limits> rows = {
      {"cgroup v2 limit below MemAvailable (6 GB limit − 1 GB in use)",
       {meminfo(24000000, 20000000),
        {"proc/self/cgroup", "0::/user.slice/app.scope\n"},
        {"sys/fs/cgroup/user.slice/app.scope/memory.max", "6000000000\n"},
        {"sys/fs/cgroup/user.slice/app.scope/memory.current", "1000000000\n"}},
       5 * kGB,
       "cgroup memory.max"},
      {"cgroup v2: a parent's limit binds, 'max' is no limit",
       {meminfo(64000000, 60000000),
        {"proc/self/cgroup", "0::/a/b\n"},
        {"sys/fs/cgroup/a/b/memory.max", "max\n"},
        {"sys/fs/cgroup/a/b/memory.current", "100\n"},
        {"sys/fs/cgroup/a/memory.max", "3000000000\n"},
        {"sys/fs/cgroup/a/memory.current", "500000000\n"}},
       2500000000u,
       "cgroup memory.max"},
      {"cgroup v1 memory controller",
       {meminfo(16000000, 15000000),
        {"proc/self/cgroup", "12:pids:/x\n4:memory:/docker/abc\n1:name=systemd:/y\n"},
        {"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "2147483648\n"},
        {"sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes", "1073741824\n"}},
       1073741824u,
       "cgroup memory.limit_in_bytes"},
      {"no cgroup: MemAvailable", {meminfo(8000000, 3000000)}, 3000000u * 1024u, "MemAvailable"},
      {"an old kernel without MemAvailable: physical RAM",
       {{"proc/meminfo", "MemTotal: 1024 kB\n"}},
       1024u * 1024u,
       "physical RAM"},
  };
  for (const Limits& row : rows) {
    SCOPED_TRACE(row.machine);
    FakeRoot r;
    for (const auto& [path, text] : row.files) r.file(path, text);
    const AvailableMemory m = available_memory(r.dir.path);
    EXPECT_EQ(m.bytes, row.bytes);
    EXPECT_EQ(m.source, row.source);
  }
  FakeRoot r;
  for (const auto& [path, text] : rows[0].files) r.file(path, text);
  EXPECT_EQ(describe(available_memory(r.dir.path)), "5.00 GB available (cgroup memory.max)");
  EXPECT_EQ(physical_memory(r.dir.path), uint64_t{24000000} * 1024);
}

TEST(SysMemory, ThisMachine_AtMostPhysicalRam) {
  const AvailableMemory m = available_memory();
  EXPECT_GT(m.bytes, 0u);
  EXPECT_LE(m.bytes, physical_memory());
  EXPECT_FALSE(m.source.empty());
}

// The pre-allocation checks use the available memory, not physical RAM, and name the limit: a
// session and a checkpoint that fit this machine are refused in a cgroup with 1000 bytes left (the
// trace importer: test_trace_corrupt.cpp).
TEST(SysMemory, LoadsRefusedInASmallCgroup_MessageNamesTheLimit) {
  FakeRoot r;
  r.file("proc/meminfo", "MemTotal: 24000000 kB\nMemAvailable: 20000000 kB\n");
  r.file("proc/self/cgroup", "0::/small\n");
  r.file("sys/fs/cgroup/small/memory.max", "501000\n");
  r.file("sys/fs/cgroup/small/memory.current", "500000\n");
  TempDir d;
  Recording rec = synthetic_recording(tiny_config(), 64, 5);
  save_session(d / "s.hlsession", rec);
  fs::create_directories(d / "ckpt");
  write_tiny_checkpoint(d / "ckpt", tiny_config());
  struct Reset {
    ~Reset() { set_memory_root_for_tests(""); }
  } reset;
  ASSERT_NO_THROW(load_session(d / "s.hlsession"));
  set_memory_root_for_tests(r.dir.path);
  std::string msg = load_error_of([&] { load_session(d / "s.hlsession"); });
  EXPECT_NE(msg.find("s.hlsession: loading needs "), std::string::npos) << msg;
  EXPECT_NE(msg.find("more than the 0.00 GB available (cgroup memory.max)"), std::string::npos) << msg;
  msg = load_error_of([&] { load_model(d / "ckpt"); });
  EXPECT_NE(msg.find("(cgroup memory.max)"), std::string::npos) << msg;
  set_memory_root_for_tests("");
  EXPECT_NO_THROW(load_model(d / "ckpt"));
}

}  // namespace
}  // namespace hl::test
