// The config.json fields of one family beyond the shared ones config.cpp reads (config.h), in the
// family's own file: config_bamba.cpp for HF BambaConfig. Internal to engine/io.
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

}  // namespace hl
