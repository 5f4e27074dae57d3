// The prompts file of `hybridlens sweep` (see sweep_prompts.h): JSON Lines checked line by line.
#include "app/cli/sweep_prompts.h"

#include <sys/stat.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/core/sha256.h"
#include "engine/io/file_check.h"

namespace hl::cli {

SweepPrompt parsePromptLine(const std::string& line, const std::string& where) {
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(line);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(where + ": not valid JSON (at byte " + std::to_string(e.byte) + ")");
  }
  if (!j.is_object())
    throw Error(where + ": expected an object {\"text\": ...}, {\"messages\": [...]} or {\"ids\": [...]}");
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.key() != "text" && it.key() != "messages" && it.key() != "ids" && it.key() != "add_generation_prompt")
      throw Error(where + ": unknown field " + quote_name(it.key()) +
                  " (allowed: text, messages, add_generation_prompt, ids)");
  const int given = static_cast<int>(j.contains("text")) + static_cast<int>(j.contains("messages")) +
                    static_cast<int>(j.contains("ids"));
  if (given != 1) throw Error(where + ": give exactly one of \"text\", \"messages\" and \"ids\"");
  if (j.contains("add_generation_prompt") && !j.contains("messages"))
    throw Error(where + ": add_generation_prompt applies to \"messages\" only");
  SweepPrompt p;
  if (j.contains("text")) {
    if (!j["text"].is_string()) throw Error(where + ": \"text\" must be a string");
    p.kind = SweepPrompt::Kind::Text;
    p.text = j["text"].get<std::string>();
  } else if (j.contains("ids")) {
    const auto& a = j["ids"];
    if (!a.is_array() || a.empty()) throw Error(where + ": \"ids\" must be a non-empty list of token ids");
    for (size_t i = 0; i < a.size(); ++i) {
      if (!a[i].is_number_integer() || a[i].get<int64_t>() < 0 || a[i].get<int64_t>() > INT32_MAX)
        throw Error(where + ": \"ids\" element " + std::to_string(i) + " is " + a[i].dump().substr(0, 40) +
                    ", expected an integer in [0, 2^31)");
      p.ids.push_back(static_cast<int32_t>(a[i].get<int64_t>()));
    }
    p.kind = SweepPrompt::Kind::Ids;
  } else {
    try {
      p.chat = parse_chat_request(j.dump(), where);
    } catch (const LoadError& e) {
      throw Error(e.what());
    }
    p.kind = SweepPrompt::Kind::Chat;
  }
  return p;
}

std::vector<SweepPrompt> readPromptsFile(const std::string& path, std::string* sha256) {
  std::ifstream f(path, std::ios::binary);
  struct stat st {};
  if (!f || ::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    throw Error("--prompts: cannot read '" + path + "'");
  if (static_cast<uint64_t>(st.st_size) > kMaxPromptsFileBytes)
    throw Error(path + ": " + std::to_string(st.st_size) + " bytes, allowed at most 4 GiB");
  const std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (sha256) *sha256 = sha256_hex(all.data(), all.size());
  std::vector<SweepPrompt> out;
  size_t at = 0;
  for (int64_t n = 1; at < all.size(); ++n) {
    size_t end = all.find('\n', at);
    if (end == std::string::npos) end = all.size();
    std::string line = all.substr(at, end - at);
    at = end + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    if (static_cast<int64_t>(out.size()) >= kMaxPrompts)
      throw Error(path + ":" + std::to_string(n) + ": more than " + std::to_string(kMaxPrompts) + " prompts");
    out.push_back(parsePromptLine(line, path + ":" + std::to_string(n)));
    out.back().line = n;
  }
  if (out.empty()) throw Error(path + ": no prompts (one JSON object a line)");
  return out;
}

}  // namespace hl::cli
