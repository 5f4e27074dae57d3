// FileStamp (file_stamp.h): stat(2) identity of a loaded file and the "changed on disk" check that
// every run step makes against the checkpoint files of its model. Not a checksum (sessions have those).
#include "engine/io/file_stamp.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "engine/core/error.h"

namespace hl {

FileStamp FileStamp::of(const std::string& path, const struct stat& st) {
  FileStamp s;
  s.path = path;
  s.dev = static_cast<uint64_t>(st.st_dev);
  s.ino = static_cast<uint64_t>(st.st_ino);
  s.size = static_cast<uint64_t>(st.st_size);
  s.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return s;
}

std::string FileStamp::change() const {
  // Allocation-free while nothing changed: every decode step calls it (Model::check_files).
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return errno == ENOENT ? "removed" : std::string(std::strerror(errno));
  const int64_t mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  const uint64_t now_size = static_cast<uint64_t>(st.st_size);
  if (static_cast<uint64_t>(st.st_dev) != dev || static_cast<uint64_t>(st.st_ino) != ino)
    return "replaced by another file";
  if (now_size != size) return "size " + std::to_string(size) + " -> " + std::to_string(now_size) + " bytes";
  if (mtime != mtime_ns) return "modified";
  return {};
}

void check_unchanged(const std::vector<FileStamp>& stamps) {
  for (const FileStamp& s : stamps) {
    const std::string why = s.change();
    if (!why.empty())
      throw Error(s.path + ": changed on disk since it was loaded (" + why + "); reload the checkpoint to go on");
  }
}

}  // namespace hl
