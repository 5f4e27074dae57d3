// The prompts file of `hybridlens sweep` (stats-format.md): JSON Lines, one prompt a line —
// {"text": "..."} (tokenized as --prompt), {"messages": [...], "add_generation_prompt": bool}
// (rendered as --chat) or {"ids": [1, 2, 3]} (as --ids); blank lines skipped. Not the tokenizing:
// cmd_sweep.cpp does that with the checkpoint, through run_args.h.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/tokenizer/chat_template.h"

namespace hl::cli {

struct SweepPrompt {
  enum class Kind { Text, Chat, Ids };
  Kind kind = Kind::Text;
  int64_t line = 0;          // 1-based line in the file
  std::string text;          // Text
  ChatRequest chat;          // Chat
  std::vector<int32_t> ids;  // Ids
};

constexpr uint64_t kMaxPromptsFileBytes = uint64_t{1} << 32;
constexpr int64_t kMaxPrompts = int64_t{1} << 24;

// Reads every prompt of `path`; the first bad line throws Error "PATH:LINE: what is wrong".
// *sha256 (when given) gets the file's digest (the sweep's identity of its prompts).
std::vector<SweepPrompt> readPromptsFile(const std::string& path, std::string* sha256 = nullptr);
// One line (no newline); `where` is "PATH:LINE".
SweepPrompt parsePromptLine(const std::string& line, const std::string& where);

}  // namespace hl::cli
