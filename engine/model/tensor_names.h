// A family's tensor names: the loader, the mixer kinds and the generator name tensors as Jamba and
// Bamba do ("model.embed_tokens.weight", "model.layers.3.mamba.in_proj.weight"); a family whose
// checkpoints spell them otherwise maps those names to its own here (Nemotron-H: "backbone." or
// "model.", "embeddings", "norm_f", one "norm" a layer, every mixer and MLP under "mixer."; Granite
// 4.0-H: "post_attention_layernorm", "model.norm", experts under "block_sparse_moe.", "shared_mlp.").
// Jamba's own names for a shared expert, which Jamba has not: "feed_forward.shared.{gate_up,down}_proj".
// Not the shapes (the kinds' binders), not the file checks (io/checkpoint.h).
#pragma once
#include <string>

#include "engine/io/config.h"

namespace hl {

// The name of the tensor `name` (Jamba's spelling) in a checkpoint of c's family whose top-level
// module is `root` ("model." or "backbone."; Jamba and Bamba always "model.").
std::string family_tensor_name(const JambaConfig& c, const std::string& root, const std::string& name);

// The root a checkpoint uses: Nemotron-H's published files say "backbone.", HF's state dict "model.".
// `has` tells whether the checkpoint holds a tensor.
template <class Has>
std::string family_root(const JambaConfig& c, Has has) {
  return c.family == Family::NemotronH && has("backbone.embeddings.weight") ? "backbone." : "model.";
}

}  // namespace hl
