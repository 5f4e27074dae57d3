#include "app/cli/sweep_progress.h"

#include <dirent.h>

#include <algorithm>
#include <cstdlib>

#include "engine/core/error.h"
#include "sessions/sweep_file.h"

namespace hl::cli {
namespace {

// What differs between a progress file's job and this one ("" when nothing does). The rank count
// is not part of the job: a sweep may continue on another number of ranks.
std::string jobMismatch(const nlohmann::ordered_json& was, const nlohmann::ordered_json& now) {
  for (const char* k : {"checkpoint", "adapter", "prompts_file", "options"}) {
    nlohmann::ordered_json a = was.value(k, nlohmann::ordered_json()), b = now.value(k, nlohmann::ordered_json());
    if (std::string(k) == "checkpoint") {  // the same weights, wherever the folder is now (as identity_mismatch)
      for (nlohmann::ordered_json* j : {&a, &b})
        if (j->is_object())
          *j = {{"config_sha256", j->value("config_sha256", "")}, {"weights_hash", j->value("weights_hash", "")}};
    }
    if (a != b) {
      const std::string what = std::string(k) == "prompts_file" ? "the prompts file" : "the " + std::string(k);
      return what + " differs (was " + a.dump().substr(0, 160) + ", now " + b.dump().substr(0, 160) + ")";
    }
  }
  return "";
}

struct Found {
  std::string path;
  int rank = 0, size = 1;
  SweepFile file;
};

// The progress files next to `out`: its stem ".partial" alone (one rank) or with ".R-of-N";
// an atomic writer's temporaries and other names are not progress files.
std::vector<Found> listProgress(const std::string& out) {
  const auto slash = out.find_last_of('/');
  const std::string folder = slash == std::string::npos ? "." : out.substr(0, slash + 1);
  const std::string prefix = slash == std::string::npos ? "" : folder;
  const std::string stem = (slash == std::string::npos ? out : out.substr(slash + 1)) + ".partial";
  std::vector<Found> found;
  DIR* d = ::opendir(folder.c_str());
  if (!d) return found;
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n == stem) {
      found.push_back({prefix + n, 0, 1, {}});
      continue;
    }
    if (n.rfind(stem + ".", 0) != 0 || n.find(".tmp.") != std::string::npos) continue;
    const std::string tail = n.substr(stem.size() + 1);  // R-of-N
    const auto of = tail.find("-of-");
    if (of == std::string::npos || of == 0 || tail.find_first_not_of("0123456789-of") != std::string::npos) continue;
    const int r = std::atoi(tail.substr(0, of).c_str()), s = std::atoi(tail.substr(of + 4).c_str());
    if (s >= 2 && r >= 0 && r < s && tail == std::to_string(r) + "-of-" + std::to_string(s))
      found.push_back({prefix + n, r, s, {}});
  }
  ::closedir(d);
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.path < b.path; });
  return found;
}

}  // namespace

std::string sweepProgressPath(const std::string& out, int rank, int size) {
  std::string p = out + ".partial";
  if (size > 1) p.append(".").append(std::to_string(rank)).append("-of-").append(std::to_string(size));
  return p;
}

SweepProgress readSweepProgress(const std::string& out, int rank, int size, const nlohmann::ordered_json& job,
                                const SweepStats& empty, int64_t prompts) {
  SweepProgress p{empty, {}, {}, {}, ""};
  std::vector<Found> found = listProgress(out);
  for (Found& f : found) {
    f.file = load_sweep_stats(f.path);
    const std::string diff = jobMismatch(f.file.manifest, job);
    if (!diff.empty())
      throw Error(f.path + ": a progress file of another sweep: " + diff +
                  "; run the same command to continue it, or delete it to start over");
    if (!f.file.exact || f.file.stats.dists.size() != empty.dists.size())
      throw Error(f.path + ": not a progress file (storage is not f64-bits)");
    for (int64_t i : f.file.finished)
      if (i < 0 || i >= prompts)
        throw Error(f.path + ": finished prompt " + std::to_string(i) + " is outside the prompts file's " +
                    std::to_string(prompts));
  }
  // Prompts claimed by two files of this rank count: refused. Files of another count, the largest
  // first: adopted when their prompts are new, left out when a file already holds them all.
  std::vector<const Found*> others;
  auto claim = [&](const Found& f) {
    for (int64_t i : f.file.finished)
      if (!p.done.insert(i).second)
        throw Error(f.path + ": finished prompt " + std::to_string(i) +
                    " is also in another progress file of this sweep; delete the .partial files to start over");
  };
  for (const Found& f : found) {
    if (f.size != size) {
      others.push_back(&f);
      continue;
    }
    claim(f);
    if (f.rank != rank) continue;
    p.stats.merge(f.file.stats);  // shapes checked; the aggregate continues exactly
    p.finished = f.file.finished;
    p.note = f.path + ": continuing after " + std::to_string(f.file.finished.size()) + " finished prompts";
  }
  std::stable_sort(others.begin(), others.end(),
                   [](const Found* a, const Found* b) { return a->file.finished.size() > b->file.finished.size(); });
  int64_t adoptedPrompts = 0;
  for (const Found* f : others) {
    p.adopted.push_back(f->path);
    const bool held = std::all_of(f->file.finished.begin(), f->file.finished.end(),
                                  [&](int64_t i) { return p.done.count(i) > 0; });
    if (held) continue;  // an adoption already saved by rank 0: nothing new in it
    claim(*f);
    adoptedPrompts += static_cast<int64_t>(f->file.finished.size());
    if (rank != 0) continue;
    p.stats.merge(f->file.stats);
    p.finished.insert(p.finished.end(), f->file.finished.begin(), f->file.finished.end());
  }
  if (adoptedPrompts > 0 && rank == 0)
    p.note += std::string(p.note.empty() ? "" : "; ") + "continuing after " + std::to_string(adoptedPrompts) +
              " finished prompts of a sweep on another number of ranks (" + std::to_string(p.adopted.size()) +
              " progress file" + (p.adopted.size() == 1 ? "" : "s") + ")";
  return p;
}

}  // namespace hl::cli
