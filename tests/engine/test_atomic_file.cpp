// write_file_atomic (engine/io/atomic_file.h), issue 18 items 5, 6 and 8: the umask and an existing
// file's mode are respected; a writer SIGKILLed mid-write leaves nothing, or a temporary the next
// write to the folder removes (never a live writer's); a full disk (RLIMIT_FSIZE: EFBIG) fails with
// one line and leaves neither a partial file nor a temporary.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/io/atomic_file.h"
#include "tests/engine/test_util.h"

namespace {

using hl::test::TempDir;

// Names in dir other than the ones given.
std::vector<std::string> others(const std::string& dir, const std::vector<std::string>& known) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      bool k = false;
      for (const std::string& s : known) k = k || s == n;
      if (!k) out.push_back(n);
    }
    ::closedir(d);
  }
  return out;
}

unsigned mode_of(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 ? st.st_mode & 07777 : 0xffff;
}

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_str(const std::string& path, const std::string& s) {
  hl::write_file_atomic(path, s.data(), s.size());
}

// Sets the umask for the scope.
struct Umask {
  mode_t old;
  explicit Umask(mode_t m) : old(::umask(m)) {}
  ~Umask() { ::umask(old); }
};

// Runs the checks under both temporaries: O_TMPFILE and the named, locked one.
class AtomicFile : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { hl::set_atomic_write_unnamed(GetParam()); }
  void TearDown() override { hl::set_atomic_write_unnamed(true); }
};

}  // namespace

TEST_P(AtomicFile, NewFile_GetsTheUmasksMode) {
  TempDir dir;
  for (mode_t m : {mode_t{077}, mode_t{022}, mode_t{027}, mode_t{002}}) {
    Umask u(m);
    const std::string p = dir / ("f" + std::to_string(m));
    write_str(p, "data");
    EXPECT_EQ(mode_of(p), 0666u & ~m) << "umask " << std::oct << m;
    EXPECT_EQ(read_all(p), "data");
  }
  EXPECT_TRUE(others(dir.path, {"f63", "f18", "f23", "f2"}).empty());
}

TEST_P(AtomicFile, ExistingFile_KeepsItsModeAndOwner) {
  TempDir dir;
  Umask u(022);
  for (unsigned mode : {0600u, 0640u, 0604u, 0664u}) {
    const std::string p = dir / "kept";
    write_str(p, "old");
    ASSERT_EQ(::chmod(p.c_str(), mode), 0);
    write_str(p, "new contents");
    EXPECT_EQ(mode_of(p), mode) << std::oct << mode;
    EXPECT_EQ(read_all(p), "new contents");
  }
  if (::geteuid() != 0) GTEST_SKIP() << "changing a file's owner needs root";
  const std::string p = dir / "owned";
  write_str(p, "old");
  ASSERT_EQ(::chown(p.c_str(), 4321, 4322), 0);
  ASSERT_EQ(::chmod(p.c_str(), 0600), 0);
  write_str(p, "new");
  struct stat st{};
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 4321u);
  EXPECT_EQ(st.st_gid, 4322u);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

// True once the writer `pid` has a temporary of `dir` open: a ".tmp.hl" name there, or (O_TMPFILE)
// an unnamed file of that folder, which /proc shows as "<dir>/#<inode> (deleted)".
bool writing(pid_t pid, const std::string& dir, bool unnamed) {
  if (!unnamed) return others(dir, {"big.hlsession"}).size() > 0;
  const std::string fds = "/proc/" + std::to_string(pid) + "/fd";
  bool found = false;
  if (DIR* d = ::opendir(fds.c_str())) {
    while (dirent* e = ::readdir(d)) {
      char link[4096];
      const ssize_t n = ::readlink((fds + "/" + e->d_name).c_str(), link, sizeof link - 1);
      if (n <= 0) continue;
      const std::string target(link, static_cast<size_t>(n));
      found = found || (target.rfind(dir + "/#", 0) == 0 && target.find("(deleted)") != std::string::npos);
    }
    ::closedir(d);
  }
  return found;
}

TEST_P(AtomicFile, KilledWriter_LeavesNoTemporaryAfterTheNextWrite) {
  TempDir dir;
  const std::string p = dir / "big.hlsession";
  const std::string a(8 << 20, 'a'), b(8 << 20, 'b');
  write_str(p, a);
  int named_left = 0;
  for (int attempt = 0; attempt < 4; ++attempt) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      hl::set_atomic_write_unnamed(GetParam());
      for (int i = 0;; ++i) {  // save forever, alternating versions, until killed
        try {
          write_str(p, i % 2 ? a : b);
        } catch (...) {
          ::_exit(3);
        }
      }
    }
    // Kill while a temporary is open (polled), a little later each attempt.
    bool seen = false;
    for (int i = 0; i < 20000 && !seen; ++i) {
      seen = writing(pid, dir.path, GetParam());
      if (!seen) ::usleep(200);
    }
    ::usleep(static_cast<useconds_t>(attempt * 700));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(seen) << "the writer never had a temporary open";
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer exited by itself (status " << status << ")";
    const std::string now = read_all(p);  // never torn
    ASSERT_TRUE(now == a || now == b) << "size " << now.size();
    const std::vector<std::string> left = others(dir.path, {"big.hlsession"});
    // O_TMPFILE: only a kill between naming and renaming (microseconds) can leave a name.
    if (GetParam()) EXPECT_LE(left.size(), 1u);
    named_left += GetParam() ? 0 : static_cast<int>(left.size());
    write_str(dir / "other.csv", "x");  // any write to the folder removes dead writers' temporaries
    EXPECT_TRUE(others(dir.path, {"big.hlsession", "other.csv"}).empty());
  }
  if (!GetParam()) {
    EXPECT_GE(named_left, 1) << "no kill left a named temporary: the clean-up was not exercised";
  }
}

TEST(AtomicFileTemps, LiveWritersTemporary_IsKept_UntilItsWriterDies) {
  TempDir dir;
  const std::string tmp = dir / "f.hlsession.tmp.hl0123abcd";
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // a writer busy on its temporary: holds the lock
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || ::flock(fd, LOCK_EX) != 0) ::_exit(3);
    (void)!::write(ready[1], "r", 1);
    for (;;) ::pause();
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  write_str(dir / "f.hlsession", "mine");
  EXPECT_EQ(hl::remove_stale_temp_files(dir.path, "f.hlsession"), 0);
  EXPECT_EQ(::access(tmp.c_str(), F_OK), 0) << "a live writer's temporary was removed";
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  write_str(dir / "f.hlsession", "again");
  EXPECT_NE(::access(tmp.c_str(), F_OK), 0) << "a dead writer's temporary was kept";
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST(AtomicFileTemps, OlderWritersTemporaries_RemovedOnlyWhenOldAndOnlyForTheirTarget) {
  TempDir dir;
  const std::string old_tmp = dir / "run.hlsession.tmp.Ab12Cd", fresh_tmp = dir / "run.hlsession.tmp.Xy34Zw";
  const std::string user = dir / "notes.tmp.backup", other = dir / "other.hlsession.tmp.Qq11Rr";
  for (const std::string& f : {old_tmp, fresh_tmp, user, other}) hl::test::write_text(f, "x");
  const timespec past[2] = {{::time(nullptr) - 120, 0}, {::time(nullptr) - 120, 0}};
  for (const std::string& f : {old_tmp, user, other}) ASSERT_EQ(::utimensat(AT_FDCWD, f.c_str(), past, 0), 0);
  write_str(dir / "run.hlsession", "s");
  EXPECT_NE(::access(old_tmp.c_str(), F_OK), 0) << "an old, unlocked temporary of this target was kept";
  EXPECT_EQ(::access(fresh_tmp.c_str(), F_OK), 0) << "a recent one may be a live older writer's";
  EXPECT_EQ(::access(user.c_str(), F_OK), 0) << "a user's file was removed";
  EXPECT_EQ(::access(other.c_str(), F_OK), 0) << "another target's temporaries wait for a write to it";
}

TEST_P(AtomicFile, FullDisk_OneLineError_NoPartialFileNoTemporary) {
  TempDir dir;
  const std::string p = dir / "fig.png", kept = dir / "kept.csv";
  write_str(kept, "old");
  int msg[2];
  ASSERT_EQ(::pipe(msg), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // a 64 KiB file-size limit stands in for a full disk: writes fail with EFBIG
    hl::set_atomic_write_unnamed(GetParam());
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit lim{64 << 10, 64 << 10};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    const std::string big(1 << 20, 'z');
    std::string m = "no error";
    int rc = 0;
    try {
      write_str(p, big);
    } catch (const hl::Error& e) {
      m = e.what();
      rc = 1;
    }
    try {
      write_str(kept, big);  // replacing: the old file stays
    } catch (const hl::Error&) {
      ++rc;
    }
    (void)!::write(msg[1], m.data(), m.size());
    ::_exit(rc);
  }
  ::close(msg[1]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  std::string m;
  char buf[512];
  for (ssize_t n; (n = ::read(msg[0], buf, sizeof buf)) > 0;) m.append(buf, static_cast<size_t>(n));
  ::close(msg[0]);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2) << "both writes must fail";
  EXPECT_EQ(m.find('\n'), std::string::npos);
  EXPECT_NE(m.find(p), std::string::npos) << m;
  EXPECT_NE(m.find(std::strerror(EFBIG)), std::string::npos) << m;
  EXPECT_NE(::access(p.c_str(), F_OK), 0) << "a partial file was left";
  EXPECT_EQ(read_all(kept), "old");
  EXPECT_TRUE(others(dir.path, {"kept.csv"}).empty());
}

INSTANTIATE_TEST_SUITE_P(Temporaries, AtomicFile, ::testing::Values(true, false),
                         [](const auto& i) { return std::string(i.param ? "Unnamed" : "Named"); });
