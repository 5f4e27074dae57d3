// Random-weight Jamba checkpoint generator: config.json plus safetensors (single file or shards
// with model.safetensors.index.json) with exactly the tensor names and shapes of jamba-spec.md §2.1
// (§2.2 fused experts and trace-format.md §1 extensions on request), and the named preset configs.
// Not a trainer: the values are deterministic random draws at scales chosen so that activations stay
// finite through depth (Mamba-style SSM init after state-spaces/mamba mamba_simple.py, spec §3.12).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/io/config.h"

namespace hl {

struct GenerateOptions {
  JambaConfig config;
  uint64_t seed = 0;
  DType dtype = DType::BF16;           // F32, F16 or BF16
  bool mixed_dtypes = false;           // per tensor F32/F16/BF16, chosen by a hash of the name
  int shards = 1;                      // 1: model.safetensors; >1: model-0000k-of-0000n + index
  bool fused_experts = false;          // v5 names: experts.gate_up_proj (E,2I,H), experts.down_proj (E,H,I)
  bool omit_lm_head_when_tied = true;  // tie_word_embeddings: leave lm_head.weight out
  int trained_registers = 0;           // R > 0: model.register_tokens (R,H); config num_register_tokens = R
  bool sinks = false;                  // self_attn.sinks (nh,) on every attention layer
  uint64_t memory_budget_bytes = 0;    // refuse a shard needing more; 0: half the physical RAM
};

// One tensor the generator writes (no data): name, shape, dtype and the file that holds it.
struct PlannedTensor {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::F32;
  int shard = 0;  // index into the shard list (0 when unsharded)
  int64_t numel() const;
  uint64_t nbytes() const { return static_cast<uint64_t>(numel()) * dtype_size(dtype); }
};

// The tensors of the checkpoint in file order, with shard assignment; cheap (no values), so it also
// serves for memory math on configs too large to generate. Throws Error on invalid options.
std::vector<PlannedTensor> plan_checkpoint(const GenerateOptions& opts);
// File names of the shards: {"model.safetensors"} or model-00001-of-0000n.safetensors, ...
std::vector<std::string> shard_file_names(int shards);

// Writes config.json, the safetensors file(s) and, when sharded, model.safetensors.index.json into
// out_dir (created if missing). Stale model*.safetensors / index files of another layout in out_dir are
// removed so the folder stays consistent. Same options and seed → byte-identical files.
// Throws Error naming the option or file on failure. Draws values on ThreadPool::global(): call it
// from the thread that runs the engine (the pool runs one parallel_for at a time).
void generate_checkpoint(const std::string& out_dir, const GenerateOptions& opts);

// The config.json generate_checkpoint writes for `opts` (dt_rank "auto" resolved, registers, dtype hint).
JambaConfig generated_config(const GenerateOptions& opts);

// A checkpoint of the right shape without values (generator_shape.cpp): config.json and one
// model.safetensors whose header lists every tensor of plan_checkpoint(opts) and whose data section is
// a hole (a sparse file: no disk blocks, zeros when read). For `info` and the load check of models too
// large to generate (a 52B Jamba): nothing is drawn and nothing should be run on it. opts.dtype only
// (no mixed dtypes, one file). Throws Error naming the option or file.
void generate_shape_only(const std::string& out_dir, const GenerateOptions& opts);

// Named configs: "tiny", "tiny-dev", "demo-random", "3b", "jamba-v0.1", "bamba-tiny", "nemotron-h-tiny",
// "granite-h-tiny" (generator_presets.cpp).
// Throws Error listing the known names for an unknown one.
JambaConfig preset_config(const std::string& name);
std::vector<std::string> preset_names();

}  // namespace hl
