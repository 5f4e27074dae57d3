// The options that `trace` and `record` share (trace-format.md §3–§4): the checkpoint and its
// adapter, the tokens (--ids, --prompt or --chat, --generate), the toggles (--normalizer, --registers),
// --backend and --out; their checks before the model loads, and the token list once it has.
// Not the parser (app/cli/args.h) and not the commands' own options (--full, --compare-*, ...).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/cli/args.h"
#include "engine/backend/backend.h"
#include "engine/model/loader.h"
#include "engine/model/sampling.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"

namespace hl::cli {

constexpr int64_t kMaxGenerate = 1 << 20;
constexpr int64_t kMaxRegisters = 1 << 16;

// --checkpoint, --ids, --prompt, --chat, --no-bos, --generate (help text `generateHelp`), --ignore-eos.
void addInputOptions(ArgParser& p, const std::string& generateHelp);
// The same without --generate and --ignore-eos (commands that only read the given tokens).
void addTokenOptions(ArgParser& p);
// --normalizer, --registers, --adapter, --backend, --weights.
void addModelOptions(ArgParser& p);

// --temperature T, --top-p P, --seed S (record, sweep).
void addSamplingOptions(ArgParser& p);
// Those and --ignore-eos; --top-p and --seed need --temperature. Throws UsageError.
SamplingOptions samplingOptions(const ParsedArgs& a);
// A number in [lo, hi] given as --`name`, else `fallback`. Throws UsageError.
double realOption(const ParsedArgs& a, const std::string& name, double fallback, double lo, double hi);

// --memory-budget SIZE and --max-context N (trace and record).
void addLimitOptions(ArgParser& p);
// Those two into `opts` and `load`. Throws UsageError.
void applyLimitOptions(const ParsedArgs& a, RunOptions* opts, LoadOptions* load);

// What addInputOptions' options allow without the model: exactly one of --ids / --prompt / --chat,
// --no-bos only with --prompt, --ignore-eos only with --generate. Throws UsageError.
void checkInputOptions(const ParsedArgs& a);
// --registers (default: the trained count) and --normalizer into `opts`. Throws UsageError.
void applyToggleOptions(const ParsedArgs& a, RunOptions* opts);
// The normalizer named by option --`name`. Throws UsageError.
Normalizer normalizerOption(const ParsedArgs& a, const std::string& name);
// --backend: auto (default), cpu, vulkan or cuda. Throws UsageError.
std::string backendOption(const ParsedArgs& a);
// Makes backend `name` for `model` and runs `body` with it. With "auto", a GPU backend that fails
// while being set up or mid-run (BackendFailure: device lost, not enough device memory) is replaced
// by the CPU backend and `body` runs again from the start; each such event prints one line
// "hybridlens COMMAND: why; ..." on stderr. An explicitly named backend's failure propagates.
// `body` may move the backend out (a Recorder owns it); returns it otherwise (null if moved).
// One function for trace, record and bench, so they fall back alike.
std::unique_ptr<Backend> runWithFallback(const std::string& command, const std::string& name,
                                         const std::shared_ptr<const Model>& model,
                                         const std::function<void(std::unique_ptr<Backend>&)>& body);

// Fails before the (possibly long) run when the output cannot be written where asked.
void checkOutputPath(const std::string& out);

// Loads --checkpoint with `o` and merges --adapter into it when given (within o's memory budget);
// --weights quantises on load (after the merge when there is an adapter).
std::shared_ptr<Model> loadModelOptions(const ParsedArgs& a, const LoadOptions& o = {});
// --weights FORMAT[+head] (model/quantize.h), nullopt for as-stored or when absent; *head says
// whether the LM head is quantised too. Throws UsageError.
std::optional<DType> weightsOption(const ParsedArgs& a, bool* head = nullptr, bool* fp32_activations = nullptr);
// The tokens to feed: --ids as given, --prompt through `tok` (the checkpoint's tokenizer.model,
// null when it has none) with BOS unless --no-bos or config.json has none, or --chat rendered with
// the checkpoint's chat template and encoded as it is (the template writes BOS); each checked against
// the vocabulary. *text (when given) gets the prompt or the rendered chat.
std::vector<int32_t> inputTokens(const ParsedArgs& a, const Model& model, const Tokenizer* tok,
                                 std::string* text = nullptr);
// --chat FILE rendered with the chat template of checkpointDir (chat_template.h). Throws Error.
std::string chatText(const ParsedArgs& a, const std::string& checkpointDir);
// The pieces of inputTokens, for commands that read their prompts elsewhere (`sweep`); `what` starts
// each message ("--prompt", "prompts.jsonl:3"). Each throws Error.
// Messages rendered with checkpointDir's chat template.
std::string renderChat(const ChatRequest& req, const std::string& checkpointDir, const std::string& what);
// A rendered chat encoded as it is (the template writes BOS); `tok` must not be null.
std::vector<int32_t> chatTokens(const Model& model, const Tokenizer* tok, const std::string& rendered,
                                const std::string& what);
// Text through `tok` (null: an error) with BOS when `bos` and config.json has one.
std::vector<int32_t> textTokens(const Model& model, const Tokenizer* tok, const std::string& text, bool bos,
                                const std::string& what);
// Every id in [0, V), else an error naming the first outside.
void checkVocabulary(const std::vector<int32_t>& ids, int64_t V, const std::string& what);

}  // namespace hl::cli
