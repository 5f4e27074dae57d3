// The atomic file write every saved file goes through (sessions, traces, figures, CSV, autosaves):
// the bytes go to a temporary file in the target's folder, are fsynced, and are renamed over the
// target, so a reader sees the old file or the new one, never a torn one. Not a reader.
// Crash residue: see write_file_atomic. Reference: rename(2), open(2) O_TMPFILE, flock(2).
#pragma once
#include <cstddef>
#include <string>

namespace hl {

// Writes bytes to path atomically. The file gets the mode a new file gets under the process umask
// (0666 & ~umask, or the folder's default ACL); when path already exists it keeps that file's mode
// and, where permitted, its owner and group. The data is written under an unnamed O_TMPFILE where
// the filesystem supports it (a SIGKILL leaves nothing), else under "<path>.tmp.hl<8 hex>", which
// the writer holds an flock(2) on until the rename. Before writing, temporaries of dead writers in
// the folder are removed (remove_stale_temp_files). Throws Error with one line naming path and the
// errno text (e.g. "No space left on device"); a failed write leaves no file behind.
void write_file_atomic(const std::string& path, const void* data, size_t size);

// Removes temporary files of writers that are gone from `folder`: "*.tmp.hl<8 hex>" files whose
// flock is free (their writer died between creating and renaming them), and the older writer's
// "<target_name>.tmp.XXXXXX" files that are unlocked and unchanged for 60 s. Never a file a live
// writer holds. Returns how many were removed. Best effort: errors are ignored.
int remove_stale_temp_files(const std::string& folder, const std::string& target_name);

// Tests: false makes write_file_atomic use the named temporary, as on filesystems without O_TMPFILE.
void set_atomic_write_unnamed(bool allowed);

}  // namespace hl
