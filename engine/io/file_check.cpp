// check_regular_file and quote_name (file_check.h). Reference: stat(2) file types (S_ISFIFO,
// S_ISCHR, S_ISBLK, S_ISSOCK); open(2) O_NONBLOCK on FIFOs.
#include "engine/io/file_check.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "engine/core/error.h"

namespace hl {

namespace {
const char* kind_of(mode_t m) {
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a file";
}
}  // namespace

void check_regular_file(const std::string& path, const std::string& what) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw LoadError(path + ": cannot open " + what + ": " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw LoadError(path + ": " + what + " is a folder, expected a file");
  if (!S_ISREG(st.st_mode))
    throw LoadError(path + ": " + what + " is not a regular file (" + kind_of(st.st_mode) + ")");
}

std::string quote_name(std::string_view name) {
  constexpr size_t kMaxShown = 200;
  std::string out = "'";
  for (size_t i = 0; i < name.size() && i < kMaxShown; ++i) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    if (c == '\'' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (name.size() > kMaxShown) out += "...";
  return out + "'";
}

}  // namespace hl
