// A GGUF model (io/gguf.h) seen as a Hugging Face checkpoint: its metadata become the family's
// config (checked by the same parse_config as a config.json), its tensors the state-dict names and
// shapes the loader binds, undoing llama.cpp's converter (tools/reference/gguf/GGUF.md §5: stacked
// experts split, A stored as −exp(A_log) turned back into A_log, conv kernels reshaped, q/k rows
// unpermuted, split gate/up rows fused again). materialize() (after the loader's memory check) copies
// each 2-D matrix made of whole stored rows of one type in that type (F16, BF16 or a ggml block
// format the kernels read, core/dtype.h) and widens the rest to F32, block formats dequantised
// bit-exactly as ggml defines them (core/ggml_quant.h).
// Not the reader's checks (gguf.cpp) and not the tokenizer (tokenizer/gguf_tokenizer.h).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/core/anon_buffer.h"
#include "engine/io/config.h"
#include "engine/io/gguf.h"
#include "engine/io/safetensors.h"

namespace hl {

// How a piece of one state-dict tensor is made from rows of a GGUF tensor. A state-dict tensor is
// made of one piece or of several (Granite's fused gate|up rows from two GGUF tensors), which cover it
// exactly once (checked by import_gguf).
struct GgufImportOp {
  // LogNeg: A_log = log(−A) elementwise. UnpermuteQK: the rows of each of `heads` heads (along the HF
  // tensor's first axis) back from llama.cpp's rotary pair order (HF row s·hd/2 + j stored at 2j + s,
  // tools/reference/gguf/GGUF.md §5.3) to HF's; the piece is the whole tensor.
  enum class Kind : uint8_t { Copy, LogNeg, UnpermuteQK };
  size_t tensor = 0;             // index into GgufImport::tensors
  int64_t dst_offset = 0;        // elements into that tensor
  const GgufTensor* src = nullptr;
  int64_t first_row = 0;         // rows of ne[0] elements into src (an expert's slab)
  int64_t rows = 0;
  Kind kind = Kind::Copy;
  int64_t heads = 0;             // UnpermuteQK
};

// A state-dict tensor by its HF name and shape.
struct GgufImportTensor {
  std::string name;
  std::vector<int64_t> shape;
};

struct GgufImport {
  std::shared_ptr<const GgufModelFiles> files;
  JambaConfig config;
  std::string config_text;    // the config as config.json text (hashed as a checkpoint's is)
  std::string architecture;   // general.architecture
  std::vector<GgufImportOp> ops;
  std::vector<TensorInfo> tensors;  // the state dict (stored type or F32), data into the buffer materialize() fills
  std::shared_ptr<AnonBuffer> buffer;
  bool materialized = false;
  bool has_tokenizer = false;  // tokenizer.ggml.model present
};

// Opens (Map: only the headers are read here) and maps a GGUF model. Throws GgufError / LoadError
// with the file, the key or tensor, and the allowed values (an unsupported architecture, a missing
// key, a tensor with other dimensions than the metadata imply, a tensor no layer uses, a type
// HybridLens cannot compute with).
std::shared_ptr<GgufImport> import_gguf(const std::string& path);
// The same for files already opened (import_gguf opens them with GgufModelFiles::open; the fuzz
// target passes GgufModelFiles::from_file of bytes in memory). materialize() reads the shards
// from their paths, so it needs files opened from disk.
std::shared_ptr<GgufImport> import_gguf_files(std::shared_ptr<const GgufModelFiles> files);
// Copies or widens every tensor into the buffer (once, later calls return at once; reads the files with pread, so a file changed meanwhile
// gives a LoadError rather than a fault).
// Stored rows are read and widened at most `chunk_bytes` at a time (a tensor's stored form is never
// held whole); tests pass a small value to cross chunk boundaries.
inline constexpr uint64_t kGgufMaterializeChunk = uint64_t{16} << 20;
void materialize(GgufImport& im, uint64_t chunk_bytes = kGgufMaterializeChunk);

// The GGUF architectures HybridLens maps ("falcon-h1", "granitehybrid", "jamba", ...).
std::vector<std::string> gguf_supported_architectures();

}  // namespace hl
