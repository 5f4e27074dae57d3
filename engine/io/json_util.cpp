// Untrusted-JSON helpers: UTF-8 check (RFC 3629 §4), duplicate-key and depth checks through
// nlohmann's parser callback, Python's Infinity/NaN (json module, allow_nan) on request, size-limited
// file reads. Every failure is a LoadError.
#include "engine/io/json_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <string_view>
#include <vector>

#include "engine/core/error.h"

namespace hl {

size_t find_invalid_utf8(const char* str, size_t n) {
  const unsigned char* s = reinterpret_cast<const unsigned char*>(str);
  size_t i = 0;
  while (i < n) {
    unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf;  // allowed range of the second byte
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      if (c == 0xe0) lo = 0xa0;  // no overlongs
      if (c == 0xed) hi = 0x9f;  // no surrogates
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      if (c == 0xf0) lo = 0x90;  // no overlongs
      if (c == 0xf4) hi = 0x8f;  // <= U+10FFFF
    } else {
      return i;
    }
    if (n - i < len) return i;
    if (s[i + 1] < lo || s[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k) {
      if (s[i + k] < 0x80 || s[i + k] > 0xbf) return i;
    }
    i += len;
  }
  return SIZE_MAX;
}

std::string json_error_text(const std::exception& e) {
  std::string w = e.what();
  if (w.rfind("[json.exception.", 0) == 0) {
    size_t p = w.find("] ");
    if (p != std::string::npos) w = w.substr(p + 2);
  }
  return w;
}

namespace {
struct DepthError {
  std::string msg;
};

// Python's constants (JsonDialect::Python). nlohmann's lexer has no option for them, so a pre-pass
// overwrites each with a number marker of the same length ("0" and spaces: line and column of every
// later error stay those of the file) and notes its ordinal among the number tokens; the parse
// callback, which sees values in file order, then puts the constant's double in place of the marker.
// Only number events are ever replaced, so a string ("Infinity" in quotes) can never become a number.
// A marker is "0" and spaces, a valid number token, so nlohmann's messages never quote one ("last
// read" shows only a token it could not read); a misplaced constant is reported as a number literal.
struct PythonConstant {
  size_t number_index;  // ordinal among the document's number tokens
  double value;
};

bool is_json_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}
bool is_json_structure(char c) {
  return c == '{' || c == '}' || c == '[' || c == ']' || c == ':' || c == ',';
}

// Scans `text` as JSON's tokenizer does: a string runs from '"' to the next '"' not escaped by '\\'
// and is skipped whole (its bytes are never changed); outside strings every maximal run of bytes that
// are not whitespace, structure or '"' is one token, which in a document that parses is a number
// (first byte '-' or a digit), true, false or null. Only a run exactly equal to a constant is
// replaced: "-NaN", "NaNx", "Infinity1" and "infinity" stay, and nlohmann rejects them at their position.
std::vector<PythonConstant> mark_python_constants(std::string* text) {
  static const struct {
    const char* spelling;
    double value;
  } kConstants[] = {{"Infinity", std::numeric_limits<double>::infinity()},
                    {"-Infinity", -std::numeric_limits<double>::infinity()},
                    {"NaN", std::numeric_limits<double>::quiet_NaN()}};
  std::vector<PythonConstant> found;
  std::string& t = *text;
  size_t numbers = 0;
  size_t i = t.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;  // nlohmann skips a leading byte-order mark
  while (i < t.size()) {
    const char c = t[i];
    if (c == '"') {
      for (++i; i < t.size() && t[i] != '"'; ++i)
        if (t[i] == '\\') ++i;  // the escaped byte ('"' or '\\' included) cannot end the string
      ++i;                      // past the closing quote (or the end of an unterminated string)
      continue;
    }
    if (is_json_space(c) || is_json_structure(c)) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < t.size() && t[end] != '"' && !is_json_space(t[end]) && !is_json_structure(t[end])) ++end;
    const std::string_view run(t.data() + i, end - i);
    bool marked = false;
    for (const auto& k : kConstants) {
      if (run != k.spelling) continue;
      found.push_back({numbers, k.value});
      std::fill(t.begin() + static_cast<std::ptrdiff_t>(i), t.begin() + static_cast<std::ptrdiff_t>(end), ' ');
      t[i] = '0';
      marked = true;
      break;
    }
    if (marked || c == '-' || (c >= '0' && c <= '9')) ++numbers;
    i = end;
  }
  return found;
}

template <class Json>
Json parse_checked(const std::string& input, const std::string& source, int max_depth, JsonDialect dialect) {
  size_t bad = find_invalid_utf8(input.data(), input.size());
  if (bad != SIZE_MAX) {
    throw LoadError(source + ": not valid UTF-8 (ill-formed byte sequence at byte " + std::to_string(bad) + ")");
  }
  std::string marked;
  std::vector<PythonConstant> constants;
  if (dialect == JsonDialect::Python) {
    marked = input;
    constants = mark_python_constants(&marked);
  }
  const std::string& text = dialect == JsonDialect::Python ? marked : input;
  size_t numbers_seen = 0, next_constant = 0;
  std::vector<std::set<std::string>> keys;  // one key set per open object
  auto cb = [&](int depth, typename Json::parse_event_t ev, Json& parsed) -> bool {
    using E = typename Json::parse_event_t;
    if (ev == E::object_start || ev == E::array_start) {
      if (depth + 1 > max_depth) {
        throw DepthError{source + ": JSON nesting depth exceeds " + std::to_string(max_depth)};
      }
      if (ev == E::object_start) keys.emplace_back();
    } else if (ev == E::object_end) {
      if (!keys.empty()) keys.pop_back();
    } else if (ev == E::key) {
      const std::string& k = parsed.template get_ref<const std::string&>();
      if (!keys.empty() && !keys.back().insert(k).second) {
        throw DepthError{source + ": key '" + k + "' appears twice in the same JSON object"};
      }
    } else if (ev == E::value && parsed.is_number()) {
      // nlohmann stores the value the callback leaves in `parsed` (json_sax_dom_callback_parser).
      if (next_constant < constants.size() && constants[next_constant].number_index == numbers_seen)
        parsed = constants[next_constant++].value;
      ++numbers_seen;
    }
    return true;
  };
  try {
    return Json::parse(text, cb);
  } catch (const DepthError& e) {
    throw LoadError(e.msg);
  } catch (const nlohmann::json::exception& e) {
    throw LoadError(source + ": invalid JSON: " + json_error_text(e));
  }
}

}  // namespace

nlohmann::json parse_json_checked(const std::string& text, const std::string& source, int max_depth,
                                  JsonDialect dialect) {
  return parse_checked<nlohmann::json>(text, source, max_depth, dialect);
}

nlohmann::ordered_json parse_json_checked_ordered(const std::string& text, const std::string& source, int max_depth,
                                                  JsonDialect dialect) {
  return parse_checked<nlohmann::ordered_json>(text, source, max_depth, dialect);
}

std::string json_number_text(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "Infinity" : "-Infinity";
  return nlohmann::json(x).dump();
}

namespace {
// nlohmann's dump layout (indent < 0: compact; else one entry a line, "key": value), so that for a
// value without NaN or infinities the text is byte for byte dump(indent, ' ', false, replace).
template <class Json>  // nlohmann::json or nlohmann::ordered_json (keys in insertion order)
void append_python(const Json& v, int indent, int depth, size_t max_chars, std::string* out) {
  if (out->size() > max_chars) return;
  const auto text = [](const Json& x) { return x.dump(-1, ' ', false, Json::error_handler_t::replace); };
  const auto newline = [&](int d) {
    if (indent >= 0) *out += '\n' + std::string(static_cast<size_t>(indent) * static_cast<size_t>(d), ' ');
  };
  if (v.is_number_float()) {
    *out += json_number_text(v.template get<double>());
  } else if ((v.is_array() || v.is_object()) && !v.empty()) {
    *out += v.is_array() ? '[' : '{';
    bool first = true;
    for (auto it = v.begin(); it != v.end() && out->size() <= max_chars; ++it) {
      if (!first) *out += ',';
      first = false;
      newline(depth + 1);
      if (v.is_object()) *out += text(Json(it.key())) + (indent >= 0 ? ": " : ":");
      append_python(it.value(), indent, depth + 1, max_chars, out);
    }
    newline(depth);
    *out += v.is_array() ? ']' : '}';
  } else {
    *out += text(v);  // strings, integers, true, false, null, [] and {}
  }
}
}  // namespace

std::string json_text_python(const nlohmann::json& v, int indent, size_t max_chars) {
  std::string out;
  append_python(v, indent, 0, max_chars, &out);
  return out;
}

std::string json_text_python(const nlohmann::ordered_json& v, int indent, size_t max_chars) {
  std::string out;
  append_python(v, indent, 0, max_chars, &out);
  return out;
}

const char* json_type_name(const nlohmann::json& v) {
  if (v.is_string()) return "string";
  if (v.is_number_integer()) return "integer";
  if (v.is_number()) return "number";
  if (v.is_boolean()) return "boolean";
  if (v.is_null()) return "null";
  if (v.is_array()) return "array";
  if (v.is_object()) return "object";
  return "binary";
}

std::string read_file_limited(const std::string& path, uint64_t max_bytes, const std::string& what) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO must not block the open
  if (fd < 0) throw LoadError(what + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw LoadError(what + ": cannot stat: " + std::strerror(err));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw LoadError(what + ": is a folder, expected a file");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw LoadError(what + ": is not a regular file (a FIFO, a device or a socket)");
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    throw LoadError(what + ": " + std::to_string(st.st_size) + " bytes, larger than the limit of " +
                    std::to_string(max_bytes) + " bytes");
  }
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < out.size()) {
    ssize_t r = ::read(fd, out.data() + got, out.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int err = errno;
      ::close(fd);
      throw LoadError(what + ": read failed: " + std::strerror(err));
    }
    if (r == 0) break;  // shrank while reading
    got += static_cast<size_t>(r);
  }
  ::close(fd);
  out.resize(got);
  return out;
}

}  // namespace hl
