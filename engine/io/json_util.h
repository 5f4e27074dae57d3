// Helpers for reading untrusted JSON (config.json, model.safetensors.index.json, adapter configs):
// UTF-8 validation, a DOM parse that rejects duplicate keys and deep nesting (optionally accepting
// the Infinity/NaN Python's json module writes), readable type names.
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

// Which text a parse accepts. Strict: RFC 8259 JSON. Python: also the three bare constants Python's
// json.dumps writes (allow_nan=True is its default) outside strings, Infinity, -Infinity and NaN,
// read as the doubles +inf, -inf and a quiet NaN; only for files Python writes (config.json,
// adapter_config.json). Anything else spelled like them (-NaN, +Infinity, infinity, NaNx) stays an error.
enum class JsonDialect { Strict, Python };

// Parses text that must be one JSON value with nesting depth <= max_depth (an object or array is one
// level) and no object holding the same key twice. Throws LoadError "source: ..." (one line; syntax
// errors name the line and column).
nlohmann::json parse_json_checked(const std::string& text, const std::string& source, int max_depth,
                                  JsonDialect dialect = JsonDialect::Strict);
// The same checks and dialects, keeping object keys in file order.
nlohmann::ordered_json parse_json_checked_ordered(const std::string& text, const std::string& source, int max_depth,
                                                  JsonDialect dialect = JsonDialect::Strict);

// A number as Python's json.dumps writes it: "Infinity", "-Infinity", "NaN" for the non-finite
// ones (nlohmann's dump would write null), nlohmann's text otherwise ("0.5", "1e-05").
std::string json_number_text(double x);
// JSON text of v as nlohmann's dump(indent) lays it out (indent < 0: compact), but with non-finite
// numbers spelled as Python's json.dumps writes them (json_number_text), so it is strict JSON exactly
// when v holds none and reads back through JsonDialect::Python either way (nlohmann's dump would turn
// them into null). Strings as dump writes them, ill-formed UTF-8 replaced by U+FFFD. Stops adding
// entries once past max_chars (for messages, which cut the text there).
std::string json_text_python(const nlohmann::json& v, int indent = -1, size_t max_chars = SIZE_MAX);
std::string json_text_python(const nlohmann::ordered_json& v, int indent = -1, size_t max_chars = SIZE_MAX);

// "string", "integer", "number", "boolean", "null", "array", "object".
const char* json_type_name(const nlohmann::json& v);

// nlohmann's exception text without its "[json.exception.…] " prefix.
std::string json_error_text(const std::exception& e);

// Reads a whole file of at most max_bytes (the file's size is checked before reading).
// `what` names the file in messages. Throws LoadError.
std::string read_file_limited(const std::string& path, uint64_t max_bytes, const std::string& what);

}  // namespace hl
