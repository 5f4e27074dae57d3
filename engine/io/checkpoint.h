// A checkpoint folder: config.json, model.safetensors or shards via model.safetensors.index.json,
// optional tokenizer.json / tokenizer.model. Opens and validates every file, then offers tensors by name.
// Or a GGUF file (one, or any shard of a gguf-split): its metadata and tensors seen as the family's
// config and state dict (io/gguf_import.h), the tokenizer from its metadata.
// Not the binding of tensors to layers: model/loader.h does that with shape checks.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/io/config.h"
#include "engine/io/safetensors.h"

namespace hl {

struct GgufImport;

struct LoadProgress {
  // Called with (done, total) units and a short description; return false to cancel (throws Cancelled).
  std::function<bool(int64_t, int64_t, const std::string&)> callback;
};

class Checkpoint {
 public:
  Checkpoint() = default;
  Checkpoint(const Checkpoint&) = delete;  // by_name_ points into shards_
  Checkpoint& operator=(const Checkpoint&) = delete;
  Checkpoint(Checkpoint&&) = default;
  Checkpoint& operator=(Checkpoint&&) = default;
  // Throws LoadError (message names the file) or Cancelled.
  // Progress: one unit per safetensors file (opening and validating it), then one for the cross-checks.
  // FileAccess::Read (load_model) reads only the headers here: the weights follow in read_data().
  // `dir` may also be a .gguf file (any content starting with the GGUF magic): dir() is then that
  // path, files() its shards, and the widened F32 weights arrive in read_data().
  static Checkpoint open(const std::string& dir, const LoadProgress& progress = {},
                         FileAccess access = FileAccess::Map);
  // With FileAccess::Read: reads every shard's tensor data (throws LoadError "changed on disk while
  // loading" when a shard shrank or was rewritten meanwhile). Idempotent; nothing to do with Map.
  void read_data() const;
  // (device, inode, size, mtime) of every shard when it was opened.
  std::vector<FileStamp> stamps() const;

  const std::string& dir() const { return dir_; }
  const JambaConfig& config() const { return config_; }
  const std::string& config_sha256() const { return config_sha256_; }
  std::string tokenizer_path() const;  // tokenizer.json, else tokenizer.model (a GGUF: the file); empty if neither
  bool is_gguf() const { return gguf_ != nullptr; }
  const GgufImport* gguf() const { return gguf_.get(); }  // null for a safetensors folder
  // What the model must keep alive besides mappings() (a GGUF's widened weights); may be null.
  std::shared_ptr<const void> owned_data() const;
  const TensorInfo* find(const std::string& name) const;
  std::vector<const TensorInfo*> all_tensors() const;
  uint64_t total_tensor_bytes() const;
  const std::vector<std::string>& files() const { return file_names_; }
  // The mappings that hold every tensor's data: a Model keeps them so the views stay valid.
  std::vector<std::shared_ptr<const MappedFile>> mappings() const;
  // Largest config.json / index file read (bigger ones are refused before reading).
  static constexpr uint64_t kMaxConfigBytes = 1 << 20;
  static constexpr uint64_t kMaxIndexBytes = 16 << 20;

 private:
  static Checkpoint open_gguf(const std::string& path, const LoadProgress& progress);
  std::string dir_;
  JambaConfig config_;
  std::string config_sha256_;
  std::vector<SafetensorsFile> shards_;
  std::vector<std::string> file_names_;
  std::map<std::string, const TensorInfo*> by_name_;
  std::shared_ptr<GgufImport> gguf_;
};

}  // namespace hl
