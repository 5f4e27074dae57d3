// `hybridlens tokenize --tokenizer DIR (--text S | --text-file F | --decode IDS) [--no-special]
// [--json]` (issue 16): the ids and pieces of a text with a checkpoint's tokenizer (tokenizer.json
// preferred over tokenizer.model), or the text of ids. Plain C++ on the engine; runs no model.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "app/cli/args.h"
#include "app/cli/commands.h"
#include "engine/io/json_util.h"
#include "engine/tokenizer/tokenizer.h"

namespace hl::cli {
namespace {

constexpr uint64_t kMaxTextBytes = uint64_t{64} << 20;

std::string dumpJson(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

int runTokenize(const std::vector<std::string>& args) {
  ArgParser p("tokenize", "--tokenizer DIR (--text S | --text-file F | --decode IDS) [--no-special] [--json]",
              "Ids and pieces of a text with a checkpoint's tokenizer (tokenizer.json, else tokenizer.model), "
              "or the text of ids.");
  p.option("tokenizer", "DIR", "a checkpoint folder or a folder with tokenizer.json / tokenizer.model, or the file", true)
      .option("text", "S", "the text to tokenize")
      .option("text-file", "F", "a file whose bytes are the text to tokenize (at most 64 MiB)")
      .option("decode", "IDS", "ids to decode instead (\"1,2,3\")")
      .flag("no-special", "add no special tokens (default: those the tokenizer adds, as Hugging Face's "
                          "add_special_tokens=True; for a tokenizer.model none)")
      .flag("json", "print one JSON object: {\"ids\": [...], \"pieces\": [...]} (pieces as stored in the "
                    "vocabulary), or {\"text\": ...} with --decode");
  const ParsedArgs a = p.parse(args);
  if (a.helpRequested()) {
    std::fputs(p.usage().c_str(), stdout);
    return 0;
  }
  const int inputs = int{a.has("text")} + int{a.has("text-file")} + int{a.has("decode")};
  if (inputs != 1) throw UsageError("give exactly one of --text, --text-file and --decode");
  const std::unique_ptr<Tokenizer> tok = load_tokenizer_for(a.get("tokenizer"));
  if (!tok) throw Error(a.get("tokenizer") + ": has no tokenizer.json or tokenizer.model");

  if (a.has("decode")) {
    std::vector<int32_t> ids;
    try {
      ids = parse_id_list(a.get("decode"));
    } catch (const Error& e) {
      throw UsageError(std::string("--decode: ") + e.what());
    }
    const std::string text = tok->decode(ids);
    if (a.has("json")) std::printf("%s\n", dumpJson({{"text", text}}).c_str());
    else std::printf("%s\n", text.c_str());
    return 0;
  }
  const std::string text = a.has("text") ? a.get("text") : read_file_limited(a.get("text-file"), kMaxTextBytes, a.get("text-file"));
  const std::vector<int32_t> ids = a.has("no-special") ? tok->encode(text) : tok->encode_special(text);
  if (a.has("json")) {
    nlohmann::json pieces = nlohmann::json::array();
    for (int32_t id : ids) pieces.push_back(tok->raw_piece(id));
    std::printf("%s\n", dumpJson({{"ids", ids}, {"pieces", pieces}}).c_str());
    return 0;
  }
  const std::vector<std::string> shown = display_pieces(*tok, ids);
  std::printf("%zu tokens (%s)\n", ids.size(), tok->kind().c_str());
  for (size_t i = 0; i < ids.size(); ++i)
    std::printf("%8d  %s%s\n", ids[i], shown[i].c_str(), tok->is_special(ids[i]) ? "  [special]" : "");
  return 0;
}

}  // namespace hl::cli
