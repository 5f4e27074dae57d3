// The config.json fields of one family beyond the shared ones config.cpp reads (config.h), in the
// family's own file: config_bamba.cpp for HF BambaConfig, config_nemotron_h.cpp for HF NemotronHConfig.
// Internal to engine/io.
#pragma once
#include <nlohmann/json.hpp>

#include "engine/io/config.h"
#include "engine/io/json_reader.h"

namespace hl {

// Reads Bamba's own fields into c (its defaults already set): the attention layer indices, the
// Mamba-2 heads, groups, chunk size and Δ clamp, RoPE. Throws LoadError (one line naming the field).
void read_bamba_fields(const JsonReader& r, JambaConfig& c);
// Writes Bamba's own fields, as HF's BambaConfig.to_dict names them.
void bamba_fields_to_json(const JambaConfig& c, nlohmann::ordered_json& j);
// Reads Nemotron-H's own fields (the layer pattern sets num_hidden_layers) into c (its defaults set).
void read_nemotron_h_fields(const JsonReader& r, JambaConfig& c);
void nemotron_h_fields_to_json(const JambaConfig& c, nlohmann::ordered_json& j);
// Granite 4.0-H's own fields: layer_types, the multipliers, experts with a shared one, NoPE or RoPE.
void read_granite_h_fields(const JsonReader& r, JambaConfig& c);
void granite_h_fields_to_json(const JambaConfig& c, nlohmann::ordered_json& j);
// Falcon-H1's own fields: the Mamba-2 side with mamba_d_ssm and its optional norm, RoPE, the µP multipliers.
void read_falcon_h1_fields(const JsonReader& r, JambaConfig& c);
void falcon_h1_fields_to_json(const JambaConfig& c, nlohmann::ordered_json& j);
// The Mamba-2 fields Bamba and Granite name alike: mamba_n_heads, mamba_d_head ("auto" or
// mamba_expand · hidden_size / heads), mamba_n_groups, mamba_chunk_size, time_step_limit/min/max.
void read_mamba2_fields(const JsonReader& r, JambaConfig& c);
// Writes those fields under the same names (Bamba's and Granite's writers).
void mamba2_fields_to_json(const JambaConfig& c, nlohmann::ordered_json& j);
// RoPE θ: a top-level rope_theta (older files), overridden by rope_parameters' and then rope_scaling's
// rope_theta; their rope_type (or type) must be "default": scaled RoPE is refused by name.
void read_rope_theta(const JsonReader& r, JambaConfig& c);
// The Mamba-2 Δ clamp `key` ([lo, hi], 0 ≤ lo < hi ≤ Infinity, or null) into time_step_limit_min/max.
void read_time_step_limit(const JsonReader& r, const char* key, JambaConfig& c);

}  // namespace hl
