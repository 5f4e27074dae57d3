// The families' spellings of the tensor names: Nemotron-H's (HF modeling_nemotron_h.py: NemotronHModel's
// embeddings, layers[i].norm and layers[i].mixer, norm_f; published checkpoints under "backbone.") and
// Granite 4.0-H's (modeling_granitemoehybrid.py). See tensor_names.h.
#include "engine/model/tensor_names.h"

namespace hl {

namespace {

// Granite 4.0-H (HF modeling_granitemoehybrid.py): post_attention_layernorm, model.norm, the experts
// fused under block_sparse_moe (router.layer, input_linear [gate | up], output_linear), shared_mlp.
std::string granite_name(const std::string& name) {
  if (name == "model.final_layernorm.weight") return "model.norm.weight";
  static const std::pair<const char*, const char*> kParts[] = {
      {"pre_ff_layernorm.weight", "post_attention_layernorm.weight"},
      {"feed_forward.router.weight", "block_sparse_moe.router.layer.weight"},
      {"feed_forward.experts.gate_up_proj", "block_sparse_moe.input_linear.weight"},
      {"feed_forward.experts.down_proj", "block_sparse_moe.output_linear.weight"},
      {"feed_forward.shared.gate_up_proj", "shared_mlp.input_linear.weight"},
      {"feed_forward.shared.down_proj", "shared_mlp.output_linear.weight"},
  };
  for (const auto& [from, to] : kParts) {
    const std::string f = from;
    if (name.size() > f.size() && name.compare(name.size() - f.size(), f.size(), f) == 0 &&
        name[name.size() - f.size() - 1] == '.')
      return name.substr(0, name.size() - f.size()) + to;
  }
  return name;
}

}  // namespace

std::string family_tensor_name(const JambaConfig& c, const std::string& root, const std::string& name) {
  if (c.family == Family::GraniteH) return granite_name(name);
  if (c.family != Family::NemotronH) return name;
  const std::string m = "model.";
  if (name.compare(0, m.size(), m) != 0) return name;  // lm_head.weight
  const std::string rest = name.substr(m.size());
  if (rest == "embed_tokens.weight") return root + "embeddings.weight";
  if (rest == "final_layernorm.weight") return root + "norm_f.weight";
  const std::string layers = "layers.";
  if (rest.compare(0, layers.size(), layers) != 0) return root + rest;  // register_tokens
  const size_t dot = rest.find('.', layers.size());
  if (dot == std::string::npos) return root + rest;
  const std::string layer = rest.substr(0, dot + 1), part = rest.substr(dot + 1);  // "layers.3.", "mamba.D"
  if (part == "input_layernorm.weight" || part == "pre_ff_layernorm.weight") return root + layer + "norm.weight";
  for (const char* module : {"mamba.", "self_attn.", "feed_forward."}) {
    const std::string p = module;
    if (part.compare(0, p.size(), p) == 0) return root + layer + "mixer." + part.substr(p.size());
  }
  return root + rest;
}

}  // namespace hl
