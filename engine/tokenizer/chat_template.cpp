// Chat templates (chat_template.h): parse once, render with limits, find a checkpoint's template
// (chat_template.jinja / chat_template.json / tokenizer_config.json) and render a message list as
// transformers' apply_chat_template does. Errors are one line: "NAME: line N: what".
// Not the Jinja machinery itself (chat_lexer/parser/eval/builtins.cpp).
#include "engine/tokenizer/chat_template.h"

#include <sys/stat.h>

#include "engine/core/error.h"
#include "engine/io/gguf.h"
#include "engine/io/json_util.h"
#include "engine/tokenizer/chat_eval.h"

namespace hl {
namespace {

constexpr uint64_t kMaxTemplateBytes = uint64_t{1} << 20;
constexpr uint64_t kMaxConfigBytes = uint64_t{64} << 20;  // tokenizer_config.json (Gemma's is 1.2 MB)
constexpr uint64_t kMaxChatFileBytes = uint64_t{16} << 20;
constexpr int kMaxJsonDepth = 64;

// Control characters (newlines in a raise_exception message) shown escaped: messages stay one line.
std::string one_line(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (static_cast<unsigned char>(c) < 0x20 && c != '\t') out += '?';
    else out += c;
  }
  return out.size() > 400 ? out.substr(0, 400) + "..." : out;
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// Checks nesting depth and UTF-8, then parses keeping key order (tojson prints keys as given).
nlohmann::ordered_json parse_ordered(const std::string& text, const std::string& source) {
  return parse_json_checked_ordered(text, source, kMaxJsonDepth);  // depth, duplicate keys, UTF-8: one-line LoadError
}

// A special token in tokenizer_config.json: a string, or an AddedToken object {"content": ...}.
std::string token_string(const nlohmann::ordered_json& cfg, const char* key, const std::string& path) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto c = it->find("content");
    if (c != it->end() && c->is_string()) return c->get<std::string>();
  }
  throw LoadError(path + ": " + key + " is neither a string nor an object with a string \"content\"");
}

// tokenizer_config.json's chat_template: a string, or a list of {"name", "template"} ("default").
std::string template_entry(const nlohmann::ordered_json& v, const std::string& path) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    std::string names;
    for (const auto& e : v) {
      if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("template") ||
          !e["template"].is_string())
        throw LoadError(path + ": chat_template list entries must be {\"name\": string, \"template\": string}");
      if (e["name"] == "default") return e["template"].get<std::string>();
      names += (names.empty() ? "" : ", ") + e["name"].get<std::string>();
    }
    throw LoadError(path + ": chat_template has no template named \"default\" (has: " + names + ")");
  }
  throw LoadError(path + ": chat_template is a " + std::string(v.is_number() ? "number" : v.is_boolean() ? "boolean" : v.is_object() ? "object" : "null") +
                  ", expected a string or a list of named templates");
}

}  // namespace

struct ChatTemplate::Impl {
  std::string name;
  jinja::Body body;
};

ChatTemplate::ChatTemplate(const std::string& source, const std::string& name) : impl_(std::make_unique<Impl>()) {
  impl_->name = name;
  if (source.size() > kMaxTemplateBytes)
    throw LoadError(name + ": chat template is " + std::to_string(source.size()) + " bytes, allowed at most " +
                    std::to_string(kMaxTemplateBytes));
  try {
    impl_->body = jinja::parse(jinja::lex(source));
  } catch (const std::runtime_error& e) {
    throw LoadError(name + ": " + one_line(e.what()));
  }
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

const std::string& ChatTemplate::name() const {
  return impl_->name;
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context, const ChatTemplateLimits& limits) const {
  if (!context.is_object()) throw Error(impl_->name + ": the template's variables must be a JSON object");
  auto root = std::make_shared<jinja::Scope>();
  for (auto it = context.begin(); it != context.end(); ++it) root->vars[it.key()] = jinja::from_json(it.value());
  jinja::Evaluator ev(limits);
  try {
    return ev.run(impl_->body, root);
  } catch (const jinja::EvalError& e) {
    throw Error(impl_->name + ": line " + std::to_string(ev.line()) + ": " + one_line(e.what()));
  }
}

namespace {

// A GGUF file's tokenizer.chat_template, rendered with the text of its bos/eos/pad/unk ids.
std::optional<ChatTemplateSource> gguf_chat_template(const std::string& path) {
  const GgufModelFiles files = GgufModelFiles::open(path);
  const std::string key = "tokenizer.chat_template";
  const GgufValue* t = files.find_value(key);
  if (!t) return std::nullopt;
  const std::string where = base_name(files.first().path()) + ": " + key;
  if (t->type != GgufValueType::STRING)
    throw LoadError(where + ": " + gguf_value_type_name(t->type) + " (allowed a STRING)");
  if (t->s.size() > kMaxTemplateBytes)
    throw LoadError(where + ": " + std::to_string(t->s.size()) + " bytes (allowed at most " + std::to_string(kMaxTemplateBytes) + ")");
  const size_t bad = find_invalid_utf8(t->s.data(), t->s.size());
  if (bad != SIZE_MAX) throw LoadError(where + ": not UTF-8 text (byte " + std::to_string(bad) + ")");
  ChatTemplateSource out;
  out.source = t->s;
  out.origin = files.first().path() + " " + key;
  const GgufValue* tokens = files.find_value("tokenizer.ggml.tokens");
  auto token = [&](const char* id_key) -> std::string {
    const GgufValue* id = files.find_value(std::string("tokenizer.ggml.") + id_key);
    if (!tokens || !id || !id->is_int() || id->i < 0 || static_cast<size_t>(id->i) >= tokens->strings.size()) return "";
    return tokens->strings[static_cast<size_t>(id->i)];
  };
  out.bos_token = token("bos_token_id");
  out.eos_token = token("eos_token_id");
  out.pad_token = token("padding_token_id");
  out.unk_token = token("unknown_token_id");
  return out;
}

}  // namespace

std::optional<ChatTemplateSource> find_chat_template(const std::string& dir) {
  if (is_gguf_file(dir)) return gguf_chat_template(dir);
  ChatTemplateSource out;
  const std::string cfg_path = dir + "/tokenizer_config.json";
  nlohmann::ordered_json cfg = nlohmann::ordered_json::object();
  if (file_exists(cfg_path)) {
    cfg = parse_ordered(read_file_limited(cfg_path, kMaxConfigBytes, cfg_path), cfg_path);
    if (!cfg.is_object()) throw LoadError(cfg_path + ": expected a JSON object at the top level");
    out.bos_token = token_string(cfg, "bos_token", cfg_path);
    out.eos_token = token_string(cfg, "eos_token", cfg_path);
    out.pad_token = token_string(cfg, "pad_token", cfg_path);
    out.unk_token = token_string(cfg, "unk_token", cfg_path);
  }
  const std::string jinja_path = dir + "/chat_template.jinja";
  const std::string json_path = dir + "/chat_template.json";
  if (file_exists(jinja_path)) {
    out.source = read_file_limited(jinja_path, kMaxTemplateBytes, jinja_path);
    const size_t bad = find_invalid_utf8(out.source.data(), out.source.size());
    if (bad != SIZE_MAX) throw LoadError(jinja_path + ": not UTF-8 text (byte " + std::to_string(bad) + ")");
    out.origin = jinja_path;
    return out;
  }
  if (file_exists(json_path)) {
    const auto j = parse_ordered(read_file_limited(json_path, kMaxConfigBytes, json_path), json_path);
    if (!j.is_object() || !j.contains("chat_template"))
      throw LoadError(json_path + ": expected an object with \"chat_template\"");
    out.source = template_entry(j["chat_template"], json_path);
    out.origin = json_path;
    return out;
  }
  auto it = cfg.find("chat_template");
  if (it == cfg.end() || it->is_null()) return std::nullopt;
  out.source = template_entry(*it, cfg_path);
  out.origin = cfg_path;
  return out;
}

ChatRequest parse_chat_request(const std::string& text, const std::string& source) {
  const auto j = parse_ordered(text, source);
  ChatRequest r;
  const nlohmann::ordered_json* msgs = &j;
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it)
      if (it.key() != "messages" && it.key() != "add_generation_prompt")
        throw LoadError(source + ": unknown field \"" + one_line(it.key()) + "\" (allowed: messages, add_generation_prompt)");
    if (!j.contains("messages")) throw LoadError(source + ": the object has no \"messages\" list");
    msgs = &j["messages"];
    if (j.contains("add_generation_prompt")) {
      if (!j["add_generation_prompt"].is_boolean()) throw LoadError(source + ": add_generation_prompt must be true or false");
      r.add_generation_prompt = j["add_generation_prompt"].get<bool>();
    }
  }
  if (!msgs->is_array()) throw LoadError(source + ": expected a list of messages or {\"messages\": [...]}");
  if (msgs->empty()) throw LoadError(source + ": the message list is empty");
  for (size_t k = 0; k < msgs->size(); ++k) {
    const auto& m = (*msgs)[k];
    const std::string at = source + ": message " + std::to_string(k + 1);
    if (!m.is_object()) throw LoadError(at + " is not an object {\"role\": ..., \"content\": ...}");
    if (!m.contains("role") || !m["role"].is_string()) throw LoadError(at + " has no string \"role\"");
    if (!m.contains("content")) throw LoadError(at + " has no \"content\"");
    if (!m["content"].is_string() && !m["content"].is_array() && !m["content"].is_null())
      throw LoadError(at + ": \"content\" must be a string, a list of parts or null");
  }
  r.messages = *msgs;
  return r;
}

ChatRequest read_chat_request(const std::string& path) {
  return parse_chat_request(read_file_limited(path, kMaxChatFileBytes, path), path);
}

std::string apply_chat_template(const ChatTemplateSource& t, const nlohmann::ordered_json& messages,
                                bool add_generation_prompt, const ChatTemplateLimits& limits) {
  const ChatTemplate tpl(t.source, t.origin.empty() ? std::string("chat template") : t.origin);
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  ctx["messages"] = messages;
  ctx["tools"] = nullptr;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = add_generation_prompt;
  ctx["bos_token"] = t.bos_token;
  ctx["eos_token"] = t.eos_token;
  if (!t.pad_token.empty()) ctx["pad_token"] = t.pad_token;
  if (!t.unk_token.empty()) ctx["unk_token"] = t.unk_token;
  return tpl.render(ctx, limits);
}

}  // namespace hl
