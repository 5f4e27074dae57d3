// Per-instance autosaves (issue 18 item 4). Each running app owns one autosave file in the folder,
// autosave-<pid>-<random>.hlsession, and holds an exclusive flock(2) on its lock file (the same
// name with .lock) for as long as it lives. The kernel drops that lock when the process ends, however
// it ends (SIGKILL included), so "its lock can be taken" means exactly "its owner is gone": only such
// orphans are offered for recovery or removed, never a live instance's autosave. Plain C++ and
// POSIX, no Qt, so it is tested across processes without a window (tests/app/test_autosave_store.cpp).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace hl::app {

class AutosaveStore {
 public:
  // Creates `dir` if needed, takes this instance's lock and removes lock files that dead instances
  // left without an autosave. Throws hl::Error naming the folder when it cannot.
  explicit AutosaveStore(const std::string& dir);
  // Releases the lock and leaves the autosave where it is: the next instance offers it.
  ~AutosaveStore();
  AutosaveStore(const AutosaveStore&) = delete;
  AutosaveStore& operator=(const AutosaveStore&) = delete;

  const std::string& dir() const { return dir_; }
  const std::string& path() const { return path_; }  // where this instance autosaves
  bool exists() const;                               // this instance's autosave is on disk
  void clear();                                      // removes it (after a save, at a clean exit)

  struct Orphan {
    std::string path;
    int64_t mtime_ns = 0;
  };
  // Autosaves whose owner is gone, newest first. Never this instance's, never a live one's.
  std::vector<Orphan> orphans() const;
  // Takes `orphan` over: under its lock, moves it to path() (replacing this instance's autosave)
  // and removes its lock file. False, touching nothing, when its owner lives or another instance
  // took it first.
  bool adopt(const std::string& orphan);
  // Removes `orphan` and its lock file under its lock. False, touching nothing, when its owner lives.
  bool discard(const std::string& orphan);

  static constexpr const char* kPrefix = "autosave-";
  static constexpr const char* kExtension = ".hlsession";

 private:
  // Runs `act` while holding the lock of `orphan` (one of this folder's autosaves, not this
  // instance's), then removes its lock file; false when the lock is held elsewhere or act fails.
  bool with_orphan_locked(const std::string& orphan, const std::function<bool()>& act);
  std::string dir_, path_, lock_path_;
  int lock_fd_ = -1;
};

}  // namespace hl::app
