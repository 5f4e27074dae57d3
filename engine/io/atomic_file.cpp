// write_file_atomic and the clean-up of dead writers' temporaries (atomic_file.h). Not the
// safetensors serializer (safetensors_writer.cpp). Reference: open(2) O_TMPFILE + linkat(2) with
// /proc/self/fd, rename(2), flock(2) for the liveness of a named temporary's writer.
#include "engine/io/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>

#include "engine/core/error.h"

namespace hl {
namespace {

constexpr const char* kTempTag = ".tmp.hl";  // "<file>.tmp.hl<8 hex>": held under flock by its writer
constexpr int kTempHex = 8;
constexpr time_t kLegacyAge = 60;  // an unlocked "<file>.tmp.XXXXXX" unchanged this long is dead
std::atomic<bool> g_unnamed{true};

bool is_hex(const std::string& s) {
  for (char ch : s)
    if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) return false;
  return true;
}

bool is_alnum6(const std::string& s) {
  if (s.size() != 6) return false;
  for (char ch : s)
    if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'))) return false;
  return true;
}

std::string temp_name(const std::string& path) {
  static thread_local std::mt19937_64 rng(std::random_device{}() ^ (static_cast<uint64_t>(::getpid()) << 32) ^
                                          static_cast<uint64_t>(::time(nullptr)));
  char hex[kTempHex + 1];
  std::snprintf(hex, sizeof hex, "%08x", static_cast<unsigned>(rng()));
  return path + kTempTag + hex;
}

// Folder of path with a trailing slash ("./" for a bare name), and the file name.
void split(const std::string& path, std::string* folder, std::string* name) {
  const size_t slash = path.rfind('/');
  *folder = slash == std::string::npos ? "./" : path.substr(0, slash + 1);
  *name = slash == std::string::npos ? path : path.substr(slash + 1);
}

bool write_all(int fd, const void* data, size_t size) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  size_t done = 0;
  while (done < size) {
    const ssize_t w = ::write(fd, p + done, size - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return false;
    if (w == 0) {
      errno = EIO;
      return false;
    }
    done += static_cast<size_t>(w);
  }
  return true;
}

// Gives the temporary the existing target's owner and mode (before any data is in it); a new
// target keeps the mode the kernel gave at creation (0666 & ~umask, or the default ACL).
void take_target_mode(int fd, const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;
  struct stat mine{};
  if (::fstat(fd, &mine) == 0 && (mine.st_uid != st.st_uid || mine.st_gid != st.st_gid))
    (void)!::fchown(fd, st.st_uid, st.st_gid);  // may be refused (not root, not a member): keep ours
  (void)!::fchmod(fd, st.st_mode & 07777);
}

}  // namespace

int remove_stale_temp_files(const std::string& folder, const std::string& target_name) {
  const std::string dir = folder.empty() ? "." : folder;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  const int dfd = ::dirfd(d);
  const std::string legacy_prefix = target_name + ".tmp.";
  const size_t tag = std::strlen(kTempTag);
  int removed = 0;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    const size_t at = n.size() > tag + kTempHex ? n.size() - tag - kTempHex : std::string::npos;
    const bool ours = at != std::string::npos && at > 0 && n.compare(at, tag, kTempTag) == 0 &&
                      is_hex(n.substr(at + tag));
    const bool legacy = !target_name.empty() && n.size() == legacy_prefix.size() + 6 &&
                        n.compare(0, legacy_prefix.size(), legacy_prefix) == 0 &&
                        is_alnum6(n.substr(legacy_prefix.size()));
    if (!ours && !legacy) continue;
    const int fd = ::openat(dfd, n.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) continue;
    struct stat st{};
    bool stale = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::flock(fd, LOCK_EX | LOCK_NB) == 0;
    if (stale && legacy) stale = ::time(nullptr) - st.st_mtime >= kLegacyAge;
    if (stale) {  // still the same file under that name (not replaced since we opened it)
      struct stat now{};
      stale = ::fstatat(dfd, n.c_str(), &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_dev == st.st_dev &&
              now.st_ino == st.st_ino;
    }
    if (stale && ::unlinkat(dfd, n.c_str(), 0) == 0) ++removed;
    ::close(fd);  // releases the lock
  }
  ::closedir(d);
  return removed;
}

namespace {

// One attempt; returns false (nothing left behind) when the unnamed file could not be given a name
// (no /proc, or a filesystem without linkat of O_TMPFILE files): the caller then writes named.
bool write_once(const std::string& path, const std::string& folder, const void* data, size_t size, bool unnamed) {
  std::string tmp;  // the temporary's name once it has one
  auto fail = [&](int fd, const std::string& what, int err) {
    if (fd >= 0) ::close(fd);
    if (!tmp.empty()) ::unlink(tmp.c_str());
    throw Error(path + ": " + what + ": " + std::strerror(err));
  };
  int fd = -1;
  if (unnamed) {
    fd = ::open(folder.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
    if (fd < 0) return false;
    ::flock(fd, LOCK_EX);  // before it has a name: a cleaner never sees it unlocked
  } else {
    for (int attempt = 0; fd < 0; ++attempt) {
      tmp = temp_name(path);
      fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
      if (fd < 0 && (errno != EEXIST || attempt > 100)) {
        tmp.clear();
        fail(-1, "cannot create a temporary file next to it", errno);
      }
      if (fd < 0) continue;
      // A cleaner may have caught it between open and flock: then it is unlinked; start again.
      struct stat st{};
      if (::flock(fd, LOCK_EX) != 0 || ::fstat(fd, &st) != 0 || st.st_nlink == 0) {
        ::close(fd);
        fd = -1;
      }
    }
  }
  take_target_mode(fd, path);
  if (!write_all(fd, data, size)) fail(fd, "write failed", errno);
  if (::fsync(fd) != 0) fail(fd, "fsync failed", errno);
  if (unnamed) {  // linkat cannot replace a file: a locked name first, then rename
    const std::string self = "/proc/self/fd/" + std::to_string(fd);
    for (int attempt = 0;; ++attempt) {
      tmp = temp_name(path);
      if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, tmp.c_str(), AT_SYMLINK_FOLLOW) == 0) break;
      const int err = errno;
      if (err == EEXIST && attempt < 100) continue;
      tmp.clear();
      if (err == ENOSPC || err == EDQUOT || err == EROFS || err == EACCES) fail(fd, "cannot name the temporary file", err);
      ::close(fd);
      return false;
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail(fd, "cannot rename the temporary file into place", errno);
  ::close(fd);  // releases the lock; the data was fsynced before the rename
  return true;
}

}  // namespace

void set_atomic_write_unnamed(bool allowed) {
  g_unnamed = allowed;
}

void write_file_atomic(const std::string& path, const void* data, size_t size) {
  std::string folder, name;
  split(path, &folder, &name);
  if (name.empty() || name == "." || name == "..") throw Error(path + ": not a file name");
  remove_stale_temp_files(folder, name);
  if (!g_unnamed || !write_once(path, folder, data, size, true)) write_once(path, folder, data, size, false);
  // Make the rename itself durable: fsync the folder (best effort).
  const int dfd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace hl
