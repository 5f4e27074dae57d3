// libFuzzer target for chat templates (engine/tokenizer/chat_template.h): any bytes as a Jinja
// template, rendered with a fixed message list as apply_chat_template does, under small limits.
// Either it renders (within the output limit) or throws hl::Error whose message is one line starting
// with the template's name; never a crash, a hang (steps are bounded) or unbounded memory.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/core/error.h"
#include "engine/tokenizer/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string src(reinterpret_cast<const char*>(data), size);
  static const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "  You are brief.\n"},
    {"role": "user", "content": "Hi <b>there</b> \u00e9\ud83d\ude42"},
    {"role": "assistant", "content": "<think>\nhm\n</think>\n\nHello!"},
    {"role": "user", "content": [{"type": "text", "text": "and"}, {"type": "image"}]}
  ])");
  hl::ChatTemplateSource t;
  t.source = src;
  t.origin = "fuzz.jinja";
  t.bos_token = "<s>";
  t.eos_token = "</s>";
  hl::ChatTemplateLimits lim;
  lim.max_output_bytes = 1 << 20;
  lim.max_work_bytes = 16 << 20;
  lim.max_steps = 200000;
  lim.now = 1721952000;
  try {
    const std::string out = hl::apply_chat_template(t, messages, size % 2 == 0, lim);
    if (out.size() > lim.max_output_bytes) std::abort();
  } catch (const hl::Error& e) {
    const std::string m = e.what();
    if (m.rfind("fuzz.jinja: ", 0) != 0 || m.find('\n') != std::string::npos) std::abort();
  }
  return 0;
}
