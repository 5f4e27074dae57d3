// GGUF reader (ggml's model file format, v2 and v3, little-endian) with llama.cpp's gguf-split
// multi-file models. Untrusted input: every read is bounds-checked before it happens and before any
// allocation, and the first failed check throws GgufError with one line "FILE: OBJECT: PROBLEM
// (allowed RANGE)" and the check's code. The checks, their codes and their messages are those of
// tools/reference/gguf/GGUF.md §2–3 (the Python reference tools/reference/gguf/gguf_io.py makes the same
// ones; tests compare both on the corruption table of tests/data/gguf).
// Not the model mapping (io/gguf_model.h) and not the arithmetic of the weight blocks
// (core/ggml_quant.h); this file only knows each type's block and byte sizes.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/io/safetensors.h"  // MappedFile, FileAccess

namespace hl {

// A refused file: `code` names the check ("magic", "offset_range", "split_missing", ...).
class GgufError : public LoadError {
 public:
  GgufError(std::string code, const std::string& message) : LoadError(message), code_(std::move(code)) {}
  const std::string& code() const { return code_; }

 private:
  std::string code_;
};

// ggml tensor types as stored in files (ggml.h enum ggml_type).
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, BF16 = 30,
};

struct GgmlTypeInfo {
  const char* name = nullptr;  // "Q4_K"
  int64_t block = 0;           // elements per block (1 for plain types)
  int64_t type_size = 0;       // bytes per block
};
// Block and byte size of every type id ggml has defined (0..42 except the removed ones); null for
// an unknown or removed id.
const GgmlTypeInfo* ggml_type_info(uint32_t id);
// "Q4_K", or "type 99" for an unknown id.
std::string ggml_type_name(uint32_t id);

// Metadata value types (gguf.h enum gguf_type).
enum class GgufValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8, ARRAY = 9,
  U64 = 10, I64 = 11, F64 = 12,
};
const char* gguf_value_type_name(GgufValueType t);  // "UINT32", "STRING", ... as gguf-py names them

// One metadata value. Scalars keep their stored type; integers are also readable as int64 (values
// above 2^63-1 of a UINT64 are kept in `u`), floats as double. Arrays hold their element type and
// the elements in the matching vector (ints for every integer type and BOOL, floats for F32/F64,
// strings for STRING).
struct GgufValue {
  GgufValueType type = GgufValueType::U8;
  GgufValueType elem = GgufValueType::U8;  // arrays only
  uint64_t u = 0;                          // integer and bool scalars (two's complement for signed)
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
  uint64_t count = 0;  // arrays: the element count

  bool is_int() const;    // an integer scalar type (not BOOL)
  bool is_float() const;  // F32 / F64
  bool is_array() const { return type == GgufValueType::ARRAY; }
  bool is_int_array() const;  // array of an integer type
};

struct GgufTensor {
  std::string name;
  uint32_t type = 0;          // GgmlType id
  std::vector<int64_t> ne;    // ggml order: ne[0] is the contiguous (row) dimension
  uint64_t offset = 0;        // from the start of the file's data section
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;  // into the file's bytes
  std::string file;               // path of the file that holds it
  int index = 0;                  // position in its file's tensor list
  int64_t numel() const;
};

// One checked GGUF file.
class GgufFile {
 public:
  static constexpr uint64_t kMaxKeyBytes = 65535;
  static constexpr uint64_t kMaxNameBytes = 63;
  static constexpr uint32_t kDefaultAlignment = 32;

  // Opens and checks the file (Read: the bytes are read into anonymous memory after the header
  // check, as checkpoints are; Map: mapped read-only). Throws GgufError.
  static GgufFile open(const std::string& path, FileAccess access = FileAccess::Map);
  // Checks an in-memory file; `name` stands for the path in messages. The bytes must outlive it.
  static GgufFile parse(const uint8_t* bytes, uint64_t size, const std::string& name);

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_start() const { return data_start_; }
  const std::string& path() const { return path_; }
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  const GgufValue* find_value(const std::string& key) const;
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find(const std::string& name) const;
  std::shared_ptr<const MappedFile> mapping() const { return map_; }

 private:
  void check(const uint8_t* bytes, uint64_t size);
  std::shared_ptr<MappedFile> map_;
  std::string path_;
  uint32_t version_ = 0;
  uint32_t alignment_ = kDefaultAlignment;
  uint64_t data_start_ = 0;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> index_;
};

// A model in one GGUF file or in the shards of a gguf-split ("PREFIX-00001-of-00003.gguf"; any
// shard's path opens all of them). Metadata comes from the first shard; tensors from all, checked
// for duplicates across shards and against split.tensors.count.
class GgufModelFiles {
 public:
  static GgufModelFiles open(const std::string& path, FileAccess access = FileAccess::Map);
  // One checked file as the whole model (e.g. GgufFile::parse of bytes in memory); its split.*
  // keys, if any, are not checked (open() checks them against the shards' names).
  static GgufModelFiles from_file(GgufFile file);
  const GgufFile& first() const { return shards_.front(); }
  const std::vector<GgufFile>& shards() const { return shards_; }
  const GgufValue* find_value(const std::string& key) const { return first().find_value(key); }
  const GgufTensor* find(const std::string& name) const;
  std::vector<const GgufTensor*> all_tensors() const;  // shard by shard, in file order
  uint64_t total_tensor_bytes() const;

 private:
  void index_names();
  std::vector<GgufFile> shards_;
  std::map<std::string, std::pair<size_t, size_t>> by_name_;  // shard, index
};

// True when the file starts with the GGUF magic (reads 4 bytes; false when unreadable).
bool is_gguf_file(const std::string& path);

}  // namespace hl
