// Chat templates: a Jinja renderer for the subset real chat templates use (Hugging Face's
// `chat_template`), the checkpoint files that carry one, and apply_chat_template's rendering of a
// message list. Untrusted input: parsing and rendering are bounded (ChatTemplateLimits) and every
// failure is one line naming the template and its line. Not tokenization (tokenizer.h).
// Reference: Jinja2 template designer documentation; transformers' apply_chat_template.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace hl {

struct ChatTemplateLimits {
  uint64_t max_output_bytes = uint64_t{4} << 20;  // the rendered text
  uint64_t max_work_bytes = uint64_t{256} << 20;  // all strings made while rendering
  int64_t max_steps = 4'000'000;                  // loop iterations, elements copied, calls
  int max_call_depth = 64;                        // macro calls inside macro calls
  int64_t now = -1;                               // strftime_now's clock (Unix seconds, UTC); -1: local now
};

class ChatTemplate {
 public:
  // Parses `source`; `name` names it in messages. Throws LoadError "NAME: line N: ..." (also for a
  // template over 1 MB).
  ChatTemplate(const std::string& source, const std::string& name);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // Renders with the variables of `context` (a JSON object). Throws Error "NAME: line N: ..." —
  // the template's own raise_exception("...") as "NAME: line N: template error: ...".
  std::string render(const nlohmann::ordered_json& context, const ChatTemplateLimits& limits = {}) const;
  const std::string& name() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A checkpoint's chat template and the special-token strings it is rendered with.
struct ChatTemplateSource {
  std::string source;  // the Jinja text
  std::string origin;  // the file it came from (and the entry: "tokenizer_config.json chat_template")
  std::string bos_token, eos_token, pad_token, unk_token;  // "" when absent
};

// Finds DIR's chat template as transformers does: chat_template.jinja, else chat_template.json
// ({"chat_template": ...}), else tokenizer_config.json's "chat_template" (a string, or a list of
// {"name", "template"} of which "default" is taken). Token strings come from tokenizer_config.json
// (a string or an {"content": ...} object). nullopt when DIR has none; LoadError (naming the file
// and field) when a file is malformed. A GGUF file (DIR is the file): its tokenizer.chat_template,
// the token strings those of its tokenizer.ggml.{bos,eos,padding,unknown}_token_id.
std::optional<ChatTemplateSource> find_chat_template(const std::string& dir);

// A --chat file: a JSON list of {role, content} messages, or {"messages": [...],
// "add_generation_prompt": bool}. Throws LoadError naming `source` and the message.
struct ChatRequest {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  bool add_generation_prompt = true;
};
ChatRequest parse_chat_request(const std::string& text, const std::string& source);
ChatRequest read_chat_request(const std::string& path);

// Renders `messages` as apply_chat_template(messages, add_generation_prompt=...) does: with
// bos_token, eos_token (and pad/unk tokens when present), tools = documents = none.
std::string apply_chat_template(const ChatTemplateSource& t, const nlohmann::ordered_json& messages,
                                bool add_generation_prompt, const ChatTemplateLimits& limits = {});

}  // namespace hl
