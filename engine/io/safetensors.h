// safetensors reader (memory-mapped, every check of reliability-checklist.md) and writer.
// Format: 8-byte little-endian header length N, N bytes of JSON, then the raw little-endian data.
// Reference: huggingface/safetensors (safetensors/src/tensor.rs) validation rules.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/io/atomic_file.h"  // write_file_atomic
#include "engine/io/file_stamp.h"

namespace hl {

// How a file's bytes reach memory. Map: a read-only mmap (sessions, adapters, identity hashing:
// read once, right away). Read: anonymous memory filled with pread (checkpoint weights, which a run
// reads for as long as the model lives: a file overwritten or truncated meanwhile cannot fault the
// process with SIGBUS, see MappedFile::open_read).
enum class FileAccess { Map, Read };

// A whole file in memory, read-only for its users; released when the last owner goes away.
class MappedFile {
 public:
  static std::shared_ptr<MappedFile> open(const std::string& path);  // Map; throws LoadError
  // Read: reserves anonymous memory of the file's size (nothing resident yet), reads the 8-byte
  // length and the header (at most 8 + SafetensorsFile::kMaxHeaderBytes bytes) and keeps the file
  // open; the rest is read by read_rest(), after the caller's memory-budget check.
  static std::shared_ptr<MappedFile> open_read(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Identity of the file at open (FileStamp::change tells whether it still has it).
  const FileStamp& stamp() const { return stamp_; }
  // Read: reads the bytes after the header, checks the file did not change meanwhile (else LoadError
  // "PATH: changed on disk while loading (...)") and closes it. Once only; Map: nothing to do.
  void read_rest() const;

 private:
  MappedFile() = default;
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  std::string path_;
  FileStamp stamp_;
  mutable int fd_ = -1;              // Read: open until read_rest()
  mutable uint64_t read_bytes_ = 0;  // Read: bytes read so far (from the start)
};

// "(192, 16)"; "()" for a scalar. Used in every shape message.
std::string shape_to_string(const std::vector<int64_t>& shape);
// The last component of a path ("model-00001.safetensors"), used to name files in messages.
std::string base_name(const std::string& path);

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;    // offsets relative to the data section
  const uint8_t* data = nullptr;  // points into the mapping
  std::string file;               // path of the file that holds it
  int64_t numel() const;
  uint64_t nbytes() const { return end - begin; }
};

// One validated safetensors file. Every check of the checklist runs in open(); a failure throws
// LoadError naming the file and the tensor.
class SafetensorsFile {
 public:
  static constexpr uint64_t kMaxHeaderBytes = 100000000;  // reliability-checklist.md
  static constexpr int kMaxRank = 8;
  // Read: the tensors' data arrive with mapping()->read_rest() (Checkpoint::read_data).
  static SafetensorsFile open(const std::string& path, FileAccess access = FileAccess::Map);
  // Validate an in-memory buffer (used by fuzzers and tests); `name` appears in messages.
  // The buffer must outlive the returned object.
  static SafetensorsFile parse(const uint8_t* bytes, uint64_t size, const std::string& name);

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }
  // The mapping that holds the tensor data (null for parse()); owners keep tensors' data alive.
  std::shared_ptr<const MappedFile> mapping() const { return map_; }
  uint64_t data_start() const { return data_start_; }  // 8 + header length: file offset of offset 0

 private:
  std::shared_ptr<MappedFile> map_;
  uint64_t data_start_ = 0;
  std::string path_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Builds a safetensors file in memory and writes it atomically (temp file + rename).
class SafetensorsWriter {
 public:
  void set_metadata(const std::string& key, const std::string& value);
  // Adds a tensor; data is copied. Throws Error on a duplicate name or size mismatch.
  void add(const std::string& name, DType dtype, const std::vector<int64_t>& shape, const void* data, size_t nbytes);
  // Adds float data converted to dtype (F32, F16 or BF16); the shape gives the element count.
  void add_float(const std::string& name, DType dtype, const std::vector<int64_t>& shape, const float* data);
  void write(const std::string& path) const;  // throws Error
  // Header padded with spaces so the data section starts 8-byte aligned; tensors are laid out by
  // decreasing element size, then in the order added, so every tensor is aligned to its element.
  std::vector<uint8_t> serialize() const;
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace hl
