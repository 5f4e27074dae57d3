// Autosaves belong to one instance (issue 18 item 4): AutosaveStore across processes. A child
// process plays the first app instance (it owns an autosave and lives on); this process plays the
// second. The second must never offer, adopt or delete the first's autosave while it lives, and must
// offer it once the first is SIGKILLed. No Qt: the store is plain POSIX.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "app/autosave_store.h"

namespace fs = std::filesystem;
using hl::app::AutosaveStore;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("hl_autosave_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

void writeText(const std::string& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

std::string readText(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A child process holding an AutosaveStore in `dir` with `text` autosaved; it reports its autosave
// path through a pipe, then waits to be killed. Returns its pid and that path.
std::pair<pid_t, std::string> spawnInstance(const fs::path& dir, const std::string& text) {
  int fds[2];
  if (::pipe(fds) != 0) return {-1, {}};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    AutosaveStore s(dir.string());
    writeText(s.path(), text);
    const std::string p = s.path() + "\n";
    if (::write(fds[1], p.data(), p.size()) != static_cast<ssize_t>(p.size())) ::_exit(1);
    for (;;) ::pause();  // a live instance
  }
  ::close(fds[1]);
  std::string path;
  char c;
  while (::read(fds[0], &c, 1) == 1 && c != '\n') path += c;
  ::close(fds[0]);
  return {pid, path};
}

void killInstance(pid_t pid) {
  ::kill(pid, SIGKILL);
  int st = 0;
  ::waitpid(pid, &st, 0);
}

}  // namespace

TEST(AutosaveStore, LiveInstanceAutosave_NotOffered_NotDeleted_ThenOfferedAfterSigkill) {
  TempDir d;
  const auto [pid, firstPath] = spawnInstance(d.path, "first instance's work");
  ASSERT_GT(pid, 0);
  ASSERT_FALSE(firstPath.empty());
  {
    AutosaveStore second(d.path.string());
    EXPECT_NE(second.path(), firstPath);
    EXPECT_TRUE(second.orphans().empty()) << "offered a live instance's autosave";
    // Answering No (discard) or Yes (adopt) on it anyway must leave it alone.
    EXPECT_FALSE(second.discard(firstPath));
    EXPECT_FALSE(second.adopt(firstPath));
    EXPECT_EQ(readText(firstPath), "first instance's work");

    killInstance(pid);  // the first instance crashes
    const auto orphans = second.orphans();
    ASSERT_EQ(orphans.size(), 1u);
    EXPECT_EQ(orphans[0].path, firstPath);
    ASSERT_TRUE(second.adopt(firstPath));
    EXPECT_FALSE(fs::exists(firstPath));
    EXPECT_EQ(readText(second.path()), "first instance's work");  // now the second's to autosave
    EXPECT_TRUE(second.orphans().empty());
    second.clear();  // a clean exit
  }
  EXPECT_TRUE(fs::is_empty(d.path)) << "a clean exit and an adopted orphan leave nothing behind";
}

TEST(AutosaveStore, OrphanDiscarded_OnlyUnderItsLock_LeavesNothing) {
  TempDir d;
  const auto [pid, orphan] = spawnInstance(d.path, "crashed work");
  ASSERT_GT(pid, 0);
  killInstance(pid);
  AutosaveStore s(d.path.string());
  ASSERT_EQ(s.orphans().size(), 1u);
  EXPECT_TRUE(s.discard(orphan));
  EXPECT_FALSE(fs::exists(orphan));
  EXPECT_TRUE(s.orphans().empty());
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(d.path)) left.push_back(e.path().filename().string());
  ASSERT_EQ(left.size(), 1u) << "only this instance's lock file remains";
  EXPECT_EQ(d.path / left[0], fs::path(s.path()).replace_extension(".lock"));
}

TEST(AutosaveStore, TwoStoresInOneProcess_NeitherSeesTheOther_DestructionMakesAnOrphan) {
  TempDir d;
  auto a = std::make_unique<AutosaveStore>(d.path.string());
  AutosaveStore b(d.path.string());
  writeText(a->path(), "a");
  writeText(b.path(), "b");
  EXPECT_TRUE(a->orphans().empty());
  EXPECT_TRUE(b.orphans().empty());
  const std::string aPath = a->path();
  a.reset();  // gone without clear(): as after a crash
  ASSERT_EQ(b.orphans().size(), 1u);
  EXPECT_EQ(b.orphans()[0].path, aPath);
}

TEST(AutosaveStore, NewestOrphanFirst_AndDeadLockFilesWithoutAutosaveAreSwept) {
  TempDir d;
  const auto [p1, older] = spawnInstance(d.path, "older");
  killInstance(p1);
  const auto [p2, newer] = spawnInstance(d.path, "newer");
  killInstance(p2);
  fs::last_write_time(older, fs::last_write_time(newer) - std::chrono::seconds(10));
  // A dead instance that never autosaved leaves only a lock file.
  const auto [p3, never] = spawnInstance(d.path, "x");
  killInstance(p3);
  fs::remove(never);
  const std::string neverLock = never.substr(0, never.size() - 10) + ".lock";
  ASSERT_TRUE(fs::exists(neverLock));
  AutosaveStore s(d.path.string());
  EXPECT_FALSE(fs::exists(neverLock));
  const auto o = s.orphans();
  ASSERT_EQ(o.size(), 2u);
  EXPECT_EQ(o[0].path, newer);
  EXPECT_EQ(o[1].path, older);
}

TEST(AutosaveStore, FolderCannotBeCreated_ErrorNamesIt) {
  TempDir d;
  fs::create_directories(d.path);
  writeText((d.path / "file").string(), "not a folder");
  try {
    AutosaveStore s((d.path / "file" / "autosave").string());
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("file/autosave: cannot create the autosave folder"), std::string::npos)
        << e.what();
  }
}
