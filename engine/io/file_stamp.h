// The identity of a file when it was read — device, inode, size, modification time — so that a run
// can tell that a checkpoint file it loaded was replaced, rewritten or truncated since (issue 18
// item 3). A cheap stat(2), not a content hash: an edit that keeps size and mtime goes unseen.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

struct stat;

namespace hl {

struct FileStamp {
  std::string path;
  uint64_t dev = 0, ino = 0, size = 0;
  int64_t mtime_ns = 0;

  static FileStamp of(const std::string& path, const struct stat& st);
  bool same_as(const FileStamp& o) const {
    return dev == o.dev && ino == o.ino && size == o.size && mtime_ns == o.mtime_ns;
  }
  // Empty while `path` still has this identity; else what changed ("removed", "replaced by another
  // file", "size 4096 -> 0 bytes", "modified").
  std::string change() const;
};

// Throws Error "PATH: changed on disk since it was loaded (WHAT); reload the checkpoint" for the
// first stamp whose file changed.
void check_unchanged(const std::vector<FileStamp>& stamps);

}  // namespace hl
