// A GGUF model in one file or in the shards of llama.cpp's gguf-split (tools/reference/gguf/GGUF.md §3):
// the shards are found from any shard's name, each is checked as a file, then as a part of the
// whole (split.no, split.count, split.tensors.count, no tensor in two shards).
#include <cstdio>
#include <regex>
#include <sys/stat.h>

#include "engine/io/file_check.h"
#include "engine/io/gguf.h"

namespace hl {
namespace {

const char* kSplitNo = "split.no";
const char* kSplitCount = "split.count";
const char* kSplitTensors = "split.tensors.count";

std::string shard_path(const std::string& prefix, int i, int n) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "-%05d-of-%05d.gguf", i + 1, n);
  return prefix + buf;
}

std::string value_text(const GgufValue& v) {
  if (v.is_int()) return std::to_string(v.i);
  if (v.type == GgufValueType::BOOL) return v.u ? "True" : "False";
  if (v.is_float()) return std::to_string(v.f);
  if (v.type == GgufValueType::STRING) return quote_name(v.s);
  return "[...]";
}

int64_t int_key(const GgufFile& g, const char* key, int64_t lo, int64_t hi) {
  const GgufValue* v = g.find_value(key);
  if (!v) throw GgufError("split_key", g.path() + ": " + key + ": missing (every shard of a split carries it)");
  const bool in_range = v->is_int() && !(v->type == GgufValueType::U64 && v->u > 0x7fffffffffffffffull) &&
                        v->i >= lo && v->i <= hi;
  if (!in_range)
    throw GgufError("split_key", g.path() + ": " + key + ": " + gguf_value_type_name(v->type) + " " + value_text(*v) +
                                     " (allowed an integer in " + std::to_string(lo) + ".." + std::to_string(hi) + ")");
  return v->i;
}

bool exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

}  // namespace

GgufModelFiles GgufModelFiles::open(const std::string& path, FileAccess access) {
  GgufModelFiles m;
  const std::string base = base_name(path);
  const std::string dir = path.substr(0, path.size() - base.size());  // "" or ".../"
  static const std::regex pattern(R"(^(.*)-(\d{5})-of-(\d{5})\.gguf$)");
  std::smatch match;
  const bool named = std::regex_match(base, match, pattern);
  GgufFile first = GgufFile::open(path, access);
  if (!first.find_value(kSplitCount) && !named) {
    m.shards_.push_back(std::move(first));
  } else {
    if (!named)
      throw GgufError("split_name", path + ": split.count is set but the file name does not end in -NNNNN-of-NNNNN.gguf");
    const int n = std::stoi(match[3].str());
    const int self = std::stoi(match[2].str());
    if (n < 1 || n > 65535) throw GgufError("split_name", path + ": shard count " + std::to_string(n) + " in the name (allowed 1..65535)");
    const std::string prefix = dir + match[1].str();
    int64_t total = -1;
    std::map<std::string, std::string> seen;  // tensor name -> shard path
    for (int i = 0; i < n; ++i) {
      const std::string p = shard_path(prefix, i, n);
      if (!exists(p)) throw GgufError("split_missing", p + ": shard " + std::to_string(i + 1) + " of " + std::to_string(n) + " is missing");
      GgufFile g = i + 1 == self ? std::move(first) : GgufFile::open(p, access);
      if (int_key(g, kSplitNo, 0, 65534) != i)
        throw GgufError("split_no", p + ": split.no is " + value_text(*g.find_value(kSplitNo)) + " (allowed " + std::to_string(i) +
                                        ": the name says shard " + std::to_string(i + 1) + ")");
      if (int_key(g, kSplitCount, 1, 65535) != n)
        throw GgufError("split_count", p + ": split.count is " + value_text(*g.find_value(kSplitCount)) + " (allowed " +
                                           std::to_string(n) + ", the count in the file names)");
      const int64_t c = int_key(g, kSplitTensors, 0, 0x7fffffffffffffffll);
      if (total < 0) total = c;
      else if (c != total)
        throw GgufError("split_tensors", p + ": split.tensors.count is " + std::to_string(c) + " (allowed " + std::to_string(total) +
                                             ", as in shard 1)");
      for (const GgufTensor& t : g.tensors()) {
        if (auto it = seen.find(t.name); it != seen.end())
          throw GgufError("duplicate_tensor", p + ": tensor " + quote_name(t.name) + ": also in " + it->second);
        seen[t.name] = p;
      }
      m.shards_.push_back(std::move(g));
    }
    if (static_cast<int64_t>(seen.size()) != total)
      throw GgufError("split_tensors", shard_path(prefix, 0, n) + ": split.tensors.count is " + std::to_string(total) + " but the " +
                                           std::to_string(n) + " shards hold " + std::to_string(seen.size()) +
                                           " tensors (allowed equal)");
  }
  m.index_names();
  return m;
}

GgufModelFiles GgufModelFiles::from_file(GgufFile file) {
  GgufModelFiles m;
  m.shards_.push_back(std::move(file));
  m.index_names();
  return m;
}

void GgufModelFiles::index_names() {
  by_name_.clear();
  for (size_t s = 0; s < shards_.size(); ++s)
    for (size_t k = 0; k < shards_[s].tensors().size(); ++k) by_name_[shards_[s].tensors()[k].name] = {s, k};
}

const GgufTensor* GgufModelFiles::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &shards_[it->second.first].tensors()[it->second.second];
}

std::vector<const GgufTensor*> GgufModelFiles::all_tensors() const {
  std::vector<const GgufTensor*> out;
  for (const GgufFile& f : shards_)
    for (const GgufTensor& t : f.tensors()) out.push_back(&t);
  return out;
}

uint64_t GgufModelFiles::total_tensor_bytes() const {
  uint64_t n = 0;
  for (const GgufFile& f : shards_)
    for (const GgufTensor& t : f.tensors()) n += t.nbytes;
  return n;
}

}  // namespace hl
