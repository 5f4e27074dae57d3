// Helpers for reading untrusted JSON (config.json, model.safetensors.index.json, adapter configs):
// UTF-8 validation, a DOM parse that rejects duplicate keys and deep nesting, readable type names.
// Not the safetensors header parser: safetensors.cpp streams that one (SAX) to bound its memory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace hl {

// Byte offset of the first byte of an ill-formed UTF-8 sequence (overlongs, surrogates and code
// points above U+10FFFF included), or SIZE_MAX when all n bytes are well-formed.
size_t find_invalid_utf8(const char* s, size_t n);

// Parses text that must be one JSON value with nesting depth <= max_depth (an object or array is one
// level) and no object holding the same key twice. Throws LoadError "source: ...".
nlohmann::json parse_json_checked(const std::string& text, const std::string& source, int max_depth);

// "string", "integer", "number", "boolean", "null", "array", "object".
const char* json_type_name(const nlohmann::json& v);

// nlohmann's exception text without its "[json.exception.…] " prefix.
std::string json_error_text(const std::exception& e);

// Reads a whole file of at most max_bytes (the file's size is checked before reading).
// `what` names the file in messages. Throws LoadError.
std::string read_file_limited(const std::string& path, uint64_t max_bytes, const std::string& what);

}  // namespace hl
