// One GGUF architecture = one short file (gguf_arch_<family>.cpp) that registers how llama.cpp's
// keys become the family's config and how its tensor names become the state dict, over the shared
// helpers here: typed metadata reads with one-line errors, shape-checked tensor lookups that record
// what was used, and the ops that widen them (io/gguf_import.h). The mapping undoes
// tools/reference/gguf/GGUF.md §5 (what llama.cpp's converter writes).
#pragma once
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "engine/core/registry.h"
#include "engine/io/gguf_import.h"

namespace hl {

// Typed reads of the first shard's metadata; errors "FILE: KEY: PROBLEM (allowed RANGE)".
struct GgufMeta {
  const GgufModelFiles& files;
  std::string arch;  // the key prefix ("jamba")
  std::string key(const std::string& k) const { return arch + "." + k; }
  std::string where(const std::string& key) const;
  const GgufValue& need(const std::string& key) const;
  int64_t integer(const std::string& key, int64_t lo, int64_t hi) const;
  int64_t integer_or(const std::string& key, int64_t fallback, int64_t lo, int64_t hi) const;
  double real(const std::string& key, double lo, double hi) const;
  // An integer array of one value per layer, or one integer meaning every layer.
  std::vector<int64_t> per_layer(const std::string& key, int64_t layers, int64_t lo, int64_t hi) const;
};

// The GGUF tensors: lookups by name with their expected ne (ggml order), and the ops making the
// state dict. Every tensor must be used by the end (check_all_used), as llama.cpp requires.
class GgufTensors {
 public:
  GgufTensors(const GgufModelFiles& files, std::string file, std::string arch)
      : files_(files), file_(std::move(file)), arch_(std::move(arch)) {}
  const GgufTensor& take(const std::string& name, const std::vector<int64_t>& ne);
  const GgufTensor* optional(const std::string& name, const std::vector<int64_t>& ne);
  bool has(const std::string& name) const;
  std::vector<int64_t> ne_of(const std::string& name) const;  // empty when absent; not marked used
  // hf_name ← rows [first_row, first_row + rows) of src (rows < 0: all), as `shape`.
  void emit(const std::string& hf_name, std::vector<int64_t> shape, const GgufTensor& src, int64_t first_row = 0,
            int64_t rows = -1, GgufImportOp::Kind kind = GgufImportOp::Kind::Copy);
  void check_all_used() const;
  std::vector<GgufImportOp> take_ops() { return std::move(ops_); }
  const std::string& file() const { return file_; }

 private:
  const GgufModelFiles& files_;
  std::string file_, arch_;
  std::set<std::string> used_;
  std::vector<GgufImportOp> ops_;
};

struct GgufArch {
  std::string name;  // general.architecture
  // The family's config from the metadata (tensors may be consulted for what the keys leave out,
  // e.g. Jamba's MoE layers); token ids are filled in afterwards by import_gguf.
  std::function<JambaConfig(const GgufMeta&, GgufTensors&)> config;
  // Emits every state-dict tensor for the checked config.
  std::function<void(const GgufMeta&, const JambaConfig&, GgufTensors&)> tensors;
};
struct GgufArchTag {};
using GgufArchRegistry = Registry<GgufArch, GgufArchTag>;

const GgufArch* find_gguf_arch(const std::string& name);

// The period p and offset o with layer i selected iff i % p == o (HF's *_layer_period/_offset),
// the smallest p that fits; none selected gives p = L + 1, o = L. Throws LoadError naming `what`
// when the selection is not periodic.
void gguf_schedule_period(const GgufMeta& m, const std::vector<bool>& selected, const std::string& what, int64_t* period,
                          int64_t* offset);

}  // namespace hl
