// Opens a Hugging Face model folder: config.json (hashed and parsed), then model.safetensors or the
// shards named by model.safetensors.index.json, each validated, then the cross-shard checks
// (plain shard names, every tensor exactly once, index and shards agree). Not the shape binding: model/loader.cpp.
#include "engine/io/checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/core/sha256.h"
#include "engine/io/file_check.h"
#include "engine/io/gguf_import.h"
#include "engine/io/json_util.h"

namespace hl {
namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";

// Something is there (a file, a symlink, a FIFO...): the reader then refuses what is not a regular
// file with "is not a regular file" rather than reporting it missing.
bool exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

// A shard name must name a file directly inside the folder.
void check_shard_name(const std::string& name) {
  auto bad = [&](const std::string& why) {
    return LoadError(std::string(kIndexName) + ": shard " + quote_name(name) + " " + why +
                     "; a shard must be a plain file name in the checkpoint folder");
  };
  if (name.empty()) throw bad("is empty");
  if (name.find('\0') != std::string::npos) throw bad("contains a NUL character");
  if (name[0] == '/' || name[0] == '\\' || (name.size() >= 2 && name[1] == ':')) throw bad("is an absolute path");
  if (name.find("..") != std::string::npos) throw bad("contains '..' (would leave the folder)");
  if (name.find('/') != std::string::npos || name.find('\\') != std::string::npos) {
    throw bad("contains a path separator");
  }
  if (name == ".") throw bad("is '.'");
}

// weight_map of the index: tensor name → shard file name, validated.
std::map<std::string, std::string> read_index(const std::string& path) {
  std::string text = read_file_limited(path, Checkpoint::kMaxIndexBytes, kIndexName);
  nlohmann::json j = parse_json_checked(text, kIndexName, 8);
  if (!j.is_object()) throw LoadError(std::string(kIndexName) + ": top level must be a JSON object");
  auto wm = j.find("weight_map");
  if (wm == j.end()) throw LoadError(std::string(kIndexName) + ": missing field 'weight_map'");
  if (!wm->is_object()) {
    throw LoadError(std::string(kIndexName) + ": field 'weight_map' must be an object, got " + json_type_name(*wm));
  }
  auto md = j.find("metadata");
  if (md != j.end() && !md->is_object() && !md->is_null()) {
    throw LoadError(std::string(kIndexName) + ": field 'metadata' must be an object, got " + json_type_name(*md));
  }
  std::map<std::string, std::string> out;
  for (const auto& [tensor, file] : wm->items()) {
    if (!file.is_string()) {
      throw LoadError(std::string(kIndexName) + ": weight_map entry for tensor '" + tensor +
                      "' must be a file name string, got " + json_type_name(file));
    }
    std::string f = file.get<std::string>();
    check_shard_name(f);
    out.emplace(tensor, f);  // duplicate keys were already rejected by parse_json_checked
  }
  if (out.empty()) throw LoadError(std::string(kIndexName) + ": weight_map is empty");
  return out;
}

}  // namespace

Checkpoint Checkpoint::open(const std::string& dir_in, const LoadProgress& progress, FileAccess access) {
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0)
    throw LoadError(dir + ": cannot open the checkpoint folder: " + std::strerror(errno));
  if (S_ISREG(st.st_mode) && is_gguf_file(dir)) return open_gguf(dir, progress);
  if (!S_ISDIR(st.st_mode))
    throw LoadError(dir + ": not a folder or a GGUF file (a checkpoint is a folder with config.json, or a .gguf file)");

  Checkpoint c;
  c.dir_ = dir;
  const std::string config_path = dir + "/config.json";
  if (!exists(config_path)) throw LoadError(dir + ": no config.json (expected a Hugging Face model folder)");
  check_regular_file(config_path, "config.json");
  std::string config_text = read_file_limited(config_path, kMaxConfigBytes, "config.json");
  c.config_sha256_ = sha256_hex(config_text.data(), config_text.size());
  c.config_ = parse_config(config_text, "config.json");

  // Which files hold the tensors (Hugging Face prefers the single file when both exist).
  std::map<std::string, std::string> weight_map;
  bool sharded = false;
  if (exists(dir + "/model.safetensors")) {
    c.file_names_ = {"model.safetensors"};
  } else if (exists(dir + "/" + kIndexName)) {
    sharded = true;
    weight_map = read_index(dir + "/" + kIndexName);
    std::set<std::string> names;
    for (const auto& [t, f] : weight_map) names.insert(f);
    c.file_names_.assign(names.begin(), names.end());
  } else {
    throw LoadError(dir + ": no model.safetensors or " + kIndexName);
  }

  const int64_t total = static_cast<int64_t>(c.file_names_.size()) + 1;
  auto report = [&](int64_t done, const std::string& what) {
    if (progress.callback && !progress.callback(done, total, what)) throw Cancelled();
  };
  for (size_t i = 0; i < c.file_names_.size(); ++i) {
    const std::string& name = c.file_names_[i];
    report(static_cast<int64_t>(i), "checking " + name);
    if (!exists(dir + "/" + name)) {
      throw LoadError(std::string(kIndexName) + ": shard " + quote_name(name) +
                      " named in weight_map is not a file in " + dir);
    }
    check_regular_file(dir + "/" + name, "shard");
    c.shards_.push_back(SafetensorsFile::open(dir + "/" + name, access));
  }
  report(total - 1, "checking tensor names");

  // Every tensor exactly once across the files.
  std::map<std::string, size_t> owner;  // tensor name → shard index
  for (size_t s = 0; s < c.shards_.size(); ++s) {
    for (const TensorInfo& t : c.shards_[s].tensors()) {
      auto [it, inserted] = owner.emplace(t.name, s);
      if (!inserted) {
        throw LoadError(c.file_names_[s] + ": duplicate tensor name " + quote_name(t.name) + ": it is also in " +
                        c.file_names_[it->second]);
      }
      c.by_name_[t.name] = &t;
    }
  }
  if (sharded) {
    for (const auto& [tensor, file] : weight_map) {
      auto it = owner.find(tensor);
      if (it == owner.end() || c.file_names_[it->second] != file) {
        throw LoadError(std::string(kIndexName) + ": tensor " + quote_name(tensor) + " is mapped to '" + file +
                        "', but that file has no tensor of that name");
      }
    }
    for (const auto& [tensor, s] : owner) {
      if (!weight_map.count(tensor)) {
        throw LoadError(c.file_names_[s] + ": tensor " + quote_name(tensor) + " is not listed in the weight_map of " +
                        kIndexName);
      }
    }
  }
  report(total, "checked");
  return c;
}

Checkpoint Checkpoint::open_gguf(const std::string& path, const LoadProgress& progress) {
  if (progress.callback && !progress.callback(0, 1, "checking " + base_name(path))) throw Cancelled();
  Checkpoint c;
  c.dir_ = path;
  c.gguf_ = import_gguf(path);
  c.config_ = c.gguf_->config;
  c.config_sha256_ = sha256_hex(c.gguf_->config_text.data(), c.gguf_->config_text.size());
  for (const GgufFile& f : c.gguf_->files->shards()) c.file_names_.push_back(base_name(f.path()));
  for (const TensorInfo& t : c.gguf_->tensors) c.by_name_[t.name] = &t;
  if (progress.callback && !progress.callback(1, 1, "checked")) throw Cancelled();
  return c;
}

std::shared_ptr<const void> Checkpoint::owned_data() const { return gguf_; }

std::string Checkpoint::tokenizer_path() const {
  if (gguf_) return gguf_->has_tokenizer ? gguf_->files->first().path() : std::string();
  for (const char* name : {"/tokenizer.json", "/tokenizer.model"})  // tokenizer.json preferred; a FIFO or device is then refused by the reader
    if (exists(dir_ + name)) return dir_ + name;
  return std::string();
}

const TensorInfo* Checkpoint::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::vector<const TensorInfo*> Checkpoint::all_tensors() const {
  std::vector<const TensorInfo*> out;
  out.reserve(by_name_.size());
  for (const auto& [name, t] : by_name_) out.push_back(t);
  return out;
}

uint64_t Checkpoint::total_tensor_bytes() const {
  uint64_t n = 0;
  for (const auto& [name, t] : by_name_) n += t->nbytes();
  return n;
}

void Checkpoint::read_data() const {
  if (gguf_) materialize(*gguf_);
  for (const SafetensorsFile& s : shards_)
    if (s.mapping()) s.mapping()->read_rest();
}

std::vector<FileStamp> Checkpoint::stamps() const {
  std::vector<FileStamp> out;
  for (const SafetensorsFile& s : shards_)
    if (s.mapping()) out.push_back(s.mapping()->stamp());
  if (gguf_)
    for (const GgufFile& f : gguf_->files->shards())
      if (f.mapping()) out.push_back(f.mapping()->stamp());
  return out;
}

std::vector<std::shared_ptr<const MappedFile>> Checkpoint::mappings() const {
  std::vector<std::shared_ptr<const MappedFile>> out;
  for (const SafetensorsFile& s : shards_) {
    if (s.mapping()) out.push_back(s.mapping());
  }
  return out;
}

}  // namespace hl
