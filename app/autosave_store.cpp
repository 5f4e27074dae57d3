// AutosaveStore (autosave_store.h): one autosave and one flock(2)-held lock file per running
// instance; orphans are the autosaves whose lock a non-blocking flock can take. flock, not a PID in
// a file: the kernel releases it with the process, so neither a reused PID nor a clock decides.
// Reference: flock(2), rename(2) (atomic within one file system).
#include "app/autosave_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <random>

#include "engine/core/error.h"

namespace hl::app {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "…/autosave-X.hlsession" → "…/autosave-X.lock".
std::string lock_of(const std::string& session) {
  return session.substr(0, session.size() - std::strlen(AutosaveStore::kExtension)) + ".lock";
}

// The exclusive lock of `lock_path` when nobody holds it (its owner is gone), else -1. The lock file
// is created when missing (an autosave whose lock file is gone has no owner). Checks that the path
// still names the locked file, so a lock file another instance just removed is not mistaken for it.
int try_lock(const std::string& lock_path) {
  int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return -1;
  }
  struct stat a {};
  struct stat b {};
  if (::fstat(fd, &a) != 0 || ::stat(lock_path.c_str(), &b) != 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Removes the lock file while still holding its lock, then releases it.
void remove_locked(const std::string& lock_path, int fd) {
  ::unlink(lock_path.c_str());
  ::close(fd);
}

}  // namespace

AutosaveStore::AutosaveStore(const std::string& dir) : dir_(dir) {
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  if (::mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST)
    throw Error(dir_ + ": cannot create the autosave folder: " + std::strerror(errno));
  std::random_device rd;
  for (int attempt = 0; attempt < 16 && lock_fd_ < 0; ++attempt) {
    char name[64];
    std::snprintf(name, sizeof name, "%s%d-%08x", kPrefix, static_cast<int>(::getpid()), rd());
    lock_path_ = dir_ + "/" + name + ".lock";
    path_ = dir_ + "/" + name + kExtension;
    int fd = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) throw Error(lock_path_ + ": cannot create the autosave lock: " + std::strerror(errno));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      ::close(fd);
      throw Error(lock_path_ + ": cannot lock: " + std::strerror(err));
    }
    lock_fd_ = fd;
  }
  if (lock_fd_ < 0) throw Error(dir_ + ": no free autosave name after 16 attempts");
  // Lock files of dead instances that never autosaved: nothing to recover, so nothing to keep.
  DIR* d = ::opendir(dir_.c_str());
  if (!d) return;
  std::vector<std::string> stale;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n.rfind(kPrefix, 0) == 0 && ends_with(n, ".lock")) stale.push_back(dir_ + "/" + n);
  }
  ::closedir(d);
  for (const std::string& lock : stale) {
    if (lock == lock_path_) continue;
    const std::string session = lock.substr(0, lock.size() - 5) + kExtension;
    struct stat st {};
    if (::stat(session.c_str(), &st) == 0) continue;  // an orphan to offer, or a live instance's
    if (int fd = try_lock(lock); fd >= 0) remove_locked(lock, fd);
  }
}

AutosaveStore::~AutosaveStore() {
  if (lock_fd_ < 0) return;
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) ::unlink(lock_path_.c_str());  // nothing to recover: no trace left
  ::close(lock_fd_);
}

bool AutosaveStore::exists() const {
  struct stat st {};
  return ::stat(path_.c_str(), &st) == 0;
}

void AutosaveStore::clear() {
  ::unlink(path_.c_str());
}

std::vector<AutosaveStore::Orphan> AutosaveStore::orphans() const {
  std::vector<Orphan> out;
  DIR* d = ::opendir(dir_.c_str());
  if (!d) return out;
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n.rfind(kPrefix, 0) == 0 && ends_with(n, kExtension)) names.push_back(dir_ + "/" + n);
  }
  ::closedir(d);
  for (const std::string& p : names) {
    if (p == path_) continue;
    const int fd = try_lock(lock_of(p));
    if (fd < 0) continue;  // its owner lives
    ::close(fd);
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    out.push_back({p, static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec});
  }
  std::sort(out.begin(), out.end(), [](const Orphan& a, const Orphan& b) {
    return a.mtime_ns != b.mtime_ns ? a.mtime_ns > b.mtime_ns : a.path < b.path;
  });
  return out;
}

bool AutosaveStore::with_orphan_locked(const std::string& orphan, const std::function<bool()>& act) {
  if (orphan == path_ || orphan.rfind(dir_ + "/", 0) != 0 || !ends_with(orphan, kExtension)) return false;
  const std::string lock = lock_of(orphan);
  const int fd = try_lock(lock);
  if (fd < 0) return false;  // its owner lives
  const bool done = act();
  remove_locked(lock, fd);
  return done;
}

bool AutosaveStore::adopt(const std::string& orphan) {
  // rename fails when the file is gone: another instance took it first.
  return with_orphan_locked(orphan, [&] { return ::rename(orphan.c_str(), path_.c_str()) == 0; });
}

bool AutosaveStore::discard(const std::string& orphan) {
  return with_orphan_locked(orphan, [&] { return ::unlink(orphan.c_str()) == 0 || errno == ENOENT; });
}

}  // namespace hl::app
