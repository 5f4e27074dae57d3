// One GGUF architecture = one short file (gguf_arch_<family>.cpp) that registers how llama.cpp's
// keys become the family's config and how its tensor names become the state dict, over the shared
// helpers here: typed metadata reads with one-line errors, shape-checked tensor lookups that record
// what was used, and the ops that widen them (io/gguf_import.h). The mapping undoes
// tools/reference/gguf/GGUF.md §5 (what llama.cpp's converter writes).
#pragma once
#include <functional>
#include <map>
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
  double real_or(const std::string& key, double fallback, double lo, double hi) const;
  bool boolean_or(const std::string& key, bool fallback) const;  // a BOOL
  bool has(const std::string& key) const { return files.find_value(key) != nullptr; }
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
  // hf_name ← src, a q or k projection (or its bias) of `heads` heads whose rows llama.cpp permuted.
  void emit_unpermuted(const std::string& hf_name, std::vector<int64_t> shape, const GgufTensor& src, int64_t heads);
  // A state-dict tensor made of pieces: declare it, then place each piece (rows of a GGUF tensor) at
  // an element offset; import_gguf checks that the pieces cover it exactly once.
  void declare(const std::string& hf_name, std::vector<int64_t> shape);
  void emit_into(const std::string& hf_name, int64_t dst_offset, const GgufTensor& src, int64_t first_row, int64_t rows);
  void check_all_used() const;
  std::vector<GgufImportOp> take_ops() { return std::move(ops_); }
  std::vector<GgufImportTensor> take_declared() { return std::move(declared_); }
  const std::string& file() const { return file_; }

 private:
  const GgufModelFiles& files_;
  std::string file_, arch_;
  std::set<std::string> used_;
  std::vector<GgufImportOp> ops_;
  std::vector<GgufImportTensor> declared_;
  std::map<std::string, size_t> index_;  // declared_ by name
  GgufImportOp& add_op(const std::string& hf_name, int64_t dst_offset, const GgufTensor& src, int64_t first_row, int64_t rows);
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

// The dimensions every architecture records: block_count, embedding_length, attention.head_count,
// context_length (`context_default` when the file has none; negative: required) and
// attention.layer_norm_rms_epsilon; torch_dtype becomes float32 (the weights are widened in memory).
void gguf_read_dims(const GgufMeta& m, JambaConfig& c, int64_t context_default);

// The period p and offset o with layer i selected iff i % p == o (HF's *_layer_period/_offset),
// the smallest p that fits; none selected gives p = L + 1, o = L. Throws LoadError naming `what`
// when the selection is not periodic.
void gguf_schedule_period(const GgufMeta& m, const std::vector<bool>& selected, const std::string& what, int64_t* period,
                          int64_t* offset);

// Pieces the Mamba-2 hybrids share (gguf_arch_mamba2.cpp).
std::string gguf_blk(int64_t layer, const char* name);  // "blk.3.ssm_in.weight"
// The vocabulary (token_embd's rows, ne[0] must be the hidden size) and tied embeddings (no output).
void gguf_read_vocab(GgufTensors& t, JambaConfig& c);
// The Mamba-2 SSM keys (GGUF.md §5.2): ssm.conv_kernel, state_size, group_count, time_step_rank (the
// heads) and inner_size (Di = heads · head dim) into c's d_conv, d_state, n_groups, n_heads, d_head;
// returns Di. Biases as `layer` (a Mamba-2 layer, or -1: none) has them: conv1d, in_proj
// (mamba_proj_bias, which also means out_proj's outside Falcon-H1).
int64_t gguf_read_mamba2(const GgufMeta& m, const GgufTensors& t, int64_t layer, JambaConfig& c);
// The Mamba-2 mixer of `layer` under HF names with prefix `hf` ("model.layers.3.mamba."): in_proj,
// conv1d (W, conv) → (conv, 1, W), dt_bias, A_log from A = −exp(A_log), D, the gated norm (G groups
// flattened), out_proj, and the biases c has.
void gguf_emit_mamba2(GgufTensors& t, const JambaConfig& c, int64_t layer, const std::string& hf);
// The attention of `layer` under prefix `hf` ("model.layers.3.self_attn."): q, k, v, o (and their
// biases when c.attention_bias), q and k rows unpermuted when llama.cpp permuted them.
void gguf_emit_attention(GgufTensors& t, const JambaConfig& c, int64_t layer, const std::string& hf, bool permuted);

}  // namespace hl
