// Available memory (engine/core/sys_memory.h, issue 18 item 2 / issue 14 item 7): the smallest of
// cgroup v2 memory.max − memory.current (this cgroup or a parent), cgroup v1 limit − usage,
// MemAvailable and physical RAM, read from fake /proc and /sys trees; and the pre-allocation checks
// of the session reader, the trace importer and the model loader refusing with the limit they used.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "engine/core/sys_memory.h"
#include "engine/model/loader.h"
#include "sessions/session_file.h"
#include "sessions/trace_import.h"
#include "tests/engine/session_test_util.h"
#include "tests/engine/test_util.h"

namespace hl::test {
namespace {

namespace fs = std::filesystem;

// A fake root: proc/meminfo with MemTotal and MemAvailable (kB), proc/self/cgroup, and files under sys/fs/cgroup.
struct FakeRoot {
  TempDir dir;
  void file(const std::string& rel, const std::string& text) {
    fs::create_directories(fs::path(dir.path + "/" + rel).parent_path());
    write_text(dir.path + "/" + rel, text);
  }
  void meminfo(uint64_t total_kb, uint64_t avail_kb) {
    file("proc/meminfo", "MemTotal:       " + std::to_string(total_kb) + " kB\nMemFree:          1000 kB\n" +
                             "MemAvailable:   " + std::to_string(avail_kb) + " kB\nBuffers:  5 kB\n");
  }
};

constexpr uint64_t kGB = 1000000000;

TEST(SysMemory, CgroupV2Limit_BelowMemAvailable_Wins) {
  FakeRoot r;
  r.meminfo(24 * kGB / 1024, 20 * kGB / 1024);  // 24 GB machine, 20 GB available
  r.file("proc/self/cgroup", "0::/user.slice/app.scope\n");
  r.file("sys/fs/cgroup/user.slice/app.scope/memory.max", "6000000000\n");
  r.file("sys/fs/cgroup/user.slice/app.scope/memory.current", "1000000000\n");
  const AvailableMemory m = available_memory(r.dir.path);
  EXPECT_EQ(m.bytes, 5 * kGB);  // 6 GB limit − 1 GB in use
  EXPECT_EQ(m.source, "cgroup memory.max");
  EXPECT_EQ(describe(m), "5.00 GB available (cgroup memory.max)");
  EXPECT_EQ(physical_memory(r.dir.path), 24 * kGB / 1024 * 1024);
}

TEST(SysMemory, CgroupV2ParentLimit_Binds_MaxIsNoLimit) {
  FakeRoot r;
  r.meminfo(64 * kGB / 1024, 60 * kGB / 1024);
  r.file("proc/self/cgroup", "0::/a/b\n");
  r.file("sys/fs/cgroup/a/b/memory.max", "max\n");
  r.file("sys/fs/cgroup/a/b/memory.current", "100\n");
  r.file("sys/fs/cgroup/a/memory.max", "3000000000\n");
  r.file("sys/fs/cgroup/a/memory.current", "500000000\n");
  const AvailableMemory m = available_memory(r.dir.path);
  EXPECT_EQ(m.bytes, 2500000000u);
  EXPECT_EQ(m.source, "cgroup memory.max");
}

TEST(SysMemory, CgroupV1Limit) {
  FakeRoot r;
  r.meminfo(16 * kGB / 1024, 15 * kGB / 1024);
  r.file("proc/self/cgroup", "12:pids:/x\n4:memory:/docker/abc\n1:name=systemd:/y\n");
  r.file("sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "2147483648\n");
  r.file("sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes", "1073741824\n");
  const AvailableMemory m = available_memory(r.dir.path);
  EXPECT_EQ(m.bytes, 1073741824u);
  EXPECT_EQ(m.source, "cgroup memory.limit_in_bytes");
}

TEST(SysMemory, NoCgroup_MemAvailable_ThenPhysicalRam) {
  FakeRoot r;
  r.meminfo(8 * kGB / 1024, 3 * kGB / 1024);
  AvailableMemory m = available_memory(r.dir.path);
  EXPECT_EQ(m.bytes, 3 * kGB / 1024 * 1024);
  EXPECT_EQ(m.source, "MemAvailable");
  r.file("proc/meminfo", "MemTotal: 1024 kB\n");  // an old kernel: no MemAvailable
  m = available_memory(r.dir.path);
  EXPECT_EQ(m.bytes, 1024u * 1024u);
  EXPECT_EQ(m.source, "physical RAM");
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
  r.meminfo(24 * kGB / 1024, 20 * kGB / 1024);
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
