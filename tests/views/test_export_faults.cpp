// `hybridlens export` on a full disk (issue 18 item 8), through the built binary: every figure and
// CSV is written atomically, so the folder holds only whole files (byte-identical to an export
// with room) and no temporaries; the first failure ends the command with ONE stderr line naming
// the file and the error, and a non-signal exit. Disk full is simulated twice: RLIMIT_FSIZE (EFBIG,
// works anywhere) and, where mount(2) is allowed (root in a VM or privileged container), a
// 192 KiB tmpfs (ENOSPC).
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "sessions/session_file.h"
#include "tests/engine/test_util.h"
#include "tests/views/view_test_util.h"

namespace fs = std::filesystem;

namespace {

using hl::test::read_text;

struct Outcome {
  int status = -1;
  std::string err;  // stderr
};

// Runs the export into `out` under an optional file-size limit (KiB; 0: none), SIGXFSZ ignored.
Outcome runExport(const std::string& session, const std::string& out, int fsize_kib, const std::string& scratch) {
  const std::string errf = scratch + "/stderr.txt";
  std::string cmd = "trap '' XFSZ; ";
  if (fsize_kib > 0) cmd += "ulimit -f " + std::to_string(fsize_kib) + "; ";
  cmd += "exec env -u DISPLAY QT_QPA_PLATFORM=offscreen " + std::string(HL_HYBRIDLENS) + " export --session '" +
         session + "' --out '" + out + "' --format png,svg --width 640 --height 400 2>'" + errf + "' >/dev/null";
  const std::string full = "bash -c \"" + cmd + "\"";
  Outcome o;
  o.status = std::system(full.c_str());
  o.err = read_text(errf);
  return o;
}

// Checks the folder after a failed export against the export with room.
void expectWholeOrAbsent(const std::string& out, const std::string& ref, const Outcome& o, const char* errtext) {
  ASSERT_TRUE(WIFEXITED(o.status)) << "ended by a signal: " << o.status;
  EXPECT_NE(WEXITSTATUS(o.status), 0);
  ASSERT_FALSE(o.err.empty());
  EXPECT_EQ(o.err.find('\n'), o.err.size() - 1) << "more than one line:\n" << o.err;
  EXPECT_NE(o.err.find(errtext), std::string::npos) << o.err;
  EXPECT_NE(o.err.find(out + "/"), std::string::npos) << "the file is not named: " << o.err;
  int whole = 0;
  for (const auto& e : fs::directory_iterator(out)) {
    const std::string n = e.path().filename().string();
    ASSERT_TRUE(fs::exists(ref + "/" + n)) << "left behind: " << n;
    EXPECT_EQ(read_text(e.path().string()), read_text(ref + "/" + n)) << n << " is not whole";
    ++whole;
  }
  std::printf("export stopped after %d whole files: %s", whole, o.err.c_str());
}

}  // namespace

TEST(ExportFaults, FileSizeLimit_OneLine_OnlyWholeFiles) {
  if (!fs::exists(HL_HYBRIDLENS)) GTEST_SKIP() << HL_HYBRIDLENS << " not built";
  const std::string dir = hl::test::tempDir("efbig");
  const std::string session = dir + "/demo.hlsession";
  hl::save_session(session, hl::test::demo().rec);
  const Outcome ok = runExport(session, dir + "/ref", 0, dir);
  ASSERT_EQ(ok.status, 0) << ok.err;
  // 48 KiB: the small CSVs and some figures fit, a larger figure does not.
  const Outcome o = runExport(session, dir + "/out", 48, dir);
  expectWholeOrAbsent(dir + "/out", dir + "/ref", o, std::strerror(EFBIG));
  fs::remove_all(dir);
}

TEST(ExportFaults, FullTmpfs_OneLine_OnlyWholeFiles) {
  if (!fs::exists(HL_HYBRIDLENS)) GTEST_SKIP() << HL_HYBRIDLENS << " not built";
  const std::string dir = hl::test::tempDir("enospc");
  const std::string session = dir + "/demo.hlsession", out = dir + "/full";
  hl::save_session(session, hl::test::demo().rec);
  fs::create_directories(out);
  if (::mount("tmpfs", out.c_str(), "tmpfs", 0, "size=192k") != 0) {
    const int err = errno;
    fs::remove_all(dir);
    GTEST_SKIP() << "mount(2) not permitted here: " << std::strerror(err);
  }
  const Outcome ok = runExport(session, dir + "/ref", 0, dir);
  const Outcome o = runExport(session, out, 0, dir);
  if (ok.status == 0) expectWholeOrAbsent(out, dir + "/ref", o, std::strerror(ENOSPC));
  EXPECT_EQ(ok.status, 0) << ok.err;
  ::umount(out.c_str());
  fs::remove_all(dir);
}
