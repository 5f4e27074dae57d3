// Two guards every reader of untrusted files uses: check_regular_file refuses a FIFO, a device, a
// socket or a folder (or a symlink to one) before anything opens it, so nothing blocks or reads
// /dev/zero forever; quote_name makes a name taken from a file safe to print in a one-line message.
// Not the readers' format checks (safetensors.cpp, json_util.cpp, tokenizer.cpp).
#pragma once
#include <string>
#include <string_view>

namespace hl {

// Throws LoadError "PATH: WHAT is not a regular file (a FIFO)" (or "... is a folder", "cannot
// open: <errno>") unless path, symlinks followed, is a regular file. `what`: "tokenizer model",
// "config.json", ... Uses stat only; callers then open with O_NONBLOCK where a swap could race.
void check_regular_file(const std::string& path, const std::string& what);

// 'name' in single quotes with control characters, DEL, the quote and backslash escaped (\x00, \n,
// \', \\) and at most 200 bytes kept (then "..."): a NUL or newline in a shard or tensor name can
// neither cut a message short nor split it over lines.
std::string quote_name(std::string_view name);

}  // namespace hl
