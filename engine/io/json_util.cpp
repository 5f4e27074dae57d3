// Untrusted-JSON helpers: UTF-8 check (RFC 3629 §4), duplicate-key and depth checks through
// nlohmann's parser callback, size-limited file reads. Every failure is a LoadError.
#include "engine/io/json_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
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
}  // namespace

nlohmann::json parse_json_checked(const std::string& text, const std::string& source, int max_depth) {
  size_t bad = find_invalid_utf8(text.data(), text.size());
  if (bad != SIZE_MAX) {
    throw LoadError(source + ": not valid UTF-8 (ill-formed byte sequence at byte " + std::to_string(bad) + ")");
  }
  std::vector<std::set<std::string>> keys;  // one key set per open object
  std::string problem;
  auto cb = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) -> bool {
    using E = nlohmann::json::parse_event_t;
    if (ev == E::object_start || ev == E::array_start) {
      if (depth + 1 > max_depth) {
        throw DepthError{source + ": JSON nesting depth exceeds " + std::to_string(max_depth)};
      }
      if (ev == E::object_start) keys.emplace_back();
    } else if (ev == E::object_end) {
      if (!keys.empty()) keys.pop_back();
    } else if (ev == E::key) {
      const std::string& k = parsed.get_ref<const std::string&>();
      if (!keys.empty() && !keys.back().insert(k).second) {
        throw DepthError{source + ": key '" + k + "' appears twice in the same JSON object"};
      }
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text, cb);
  } catch (const DepthError& e) {
    throw LoadError(e.msg);
  } catch (const nlohmann::json::exception& e) {
    throw LoadError(source + ": invalid JSON: " + json_error_text(e));
  }
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
