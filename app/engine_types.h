// Value types that cross between the GUI thread and the one engine thread (DESIGN.md: results
// come back as value copies through queued signals): run requests, toggles, the loaded model's
// description, one step's records, adapter results. Plain data; no behaviour beyond comparisons.
#pragma once
#include <QMetaType>
#include <QString>
#include <QStringList>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/model/sampling.h"
#include "engine/model/token_trace.h"
#include "engine/probes/dora_probe.h"
#include "engine/tokenizer/chat_template.h"
#include "sessions/recording.h"
#include "views/view_state.h"

namespace hl {
class Tokenizer;
}

namespace hl::app {

// The toggles of issue 5 item 4: what a run B changes against run A.
struct Toggles {
  bool normalizerOverride = false;  // false: each layer as trained
  hl::Normalizer normalizer = hl::Normalizer::Softmax;
  int registers = -1;    // -1: the trained count
  bool adapter = false;  // base + the loaded adapter merged
  bool operator==(const Toggles& o) const {
    return normalizerOverride == o.normalizerOverride && (!normalizerOverride || normalizer == o.normalizer) &&
           registers == o.registers && adapter == o.adapter;
  }
  bool operator!=(const Toggles& o) const { return !(*this == o); }
};

// A new run A: its tokens (ids, or text for the tokenizer) and settings. Not stepped yet.
struct RunRequest {
  int runId = 0;
  bool useText = true;       // tokenize `text`; else `ids`
  QString text;              // the prompt as typed
  std::vector<int32_t> ids;  // when !useText
  bool addBos = true;        // with text: prepend bos_token_id
  Toggles toggles;           // run A's settings
  QString backend = QStringLiteral("auto");
  hl::SamplingOptions sampling;
  int64_t maxNewTokens = 64;  // "Run to end" stops here (or at an EOS)
};

// What the engine says about a checkpoint it loaded.
struct ModelInfo {
  int requestId = 0;
  QString dir, name;
  hl::JambaConfig config;
  hl::LayerSchedule schedule;  // the model's, resolved at load (engine/model/layer_schedule.h)
  hl::CheckpointIdentity identity;
  bool hasTokenizer = false;
  std::vector<std::string> vocab;  // token text by id (empty without a tokenizer)
  std::optional<hl::ChatTemplateSource> chatTemplate;  // the checkpoint's chat template (chat_template.h)
  QString chatTemplateError;                            // why a present template could not be read
  std::shared_ptr<const hl::Tokenizer> chatTokenizer;   // a GUI-thread copy that counts chat tokens
  int64_t params = 0, activeParams = 0, weightBytesPerToken = 0;
  double loadSeconds = 0;
  QString weights;       // the --weights label of the load ("q8_0", "as-stored+fp32-activations"), empty: as stored
  QString quantSummary;  // one line on what quantising did (matrices, worst relative RMS error), or empty
  QStringList backends;  // available_backends()
};

// The tokens of a fresh run A, as the engine tokenized them.
struct RunStart {
  int runId = 0;
  QString prompt;
  std::vector<int32_t> tokens;     // (P,) the prompt tokens to feed
  std::vector<std::string> texts;  // their text (empty strings without a tokenizer)
  std::vector<char> special;       // per token: a special token (BOS/EOS, chat-template, added special)
  hl::RunSettings settings;        // run A
  QString backend;                 // resolved backend name
};

// One step: the record of run A and, while a compare run is live, of run B for the same token —
// the engine recorder's own records, shared (sessions/record_list.h), not copies.
struct StepResult {
  int runId = 0;
  std::shared_ptr<const hl::TokenTrace> a;
  bool hasB = false;
  int compareId = 0;
  std::shared_ptr<const hl::TokenTrace> b;
  std::string text;        // the token's text
  bool special = false;    // a special token of the tokenizer (false without one)
  bool generated = false;  // sampled (false: a prompt token fed)
  double runSecondsA = 0, runSecondsB = 0;
};

// A loaded PEFT adapter or a fine-tuned checkpoint, with its DoRA rows against the base.
struct AdapterInfo {
  QString dir;
  bool isAdapter = true;  // false: a second (fine-tuned) checkpoint
  bool isDora = false;
  std::vector<hl::DoraRow> rows;
  QString label;         // "DoRA", "LoRA", "fine-tuned"
  std::string identity;  // sessions' adapter identity (folder + config sha256), adapters only
};

// Flags the GUI sets and the engine reads between tokens (never waits on).
struct EngineFlags {
  std::atomic<int> stopEpoch{0};    // a command sent at epoch e stops once this differs from e
  std::atomic<int> cancelEpoch{0};  // the same for loads
};

}  // namespace hl::app

Q_DECLARE_METATYPE(hl::app::ModelInfo)
Q_DECLARE_METATYPE(hl::app::RunStart)
Q_DECLARE_METATYPE(hl::app::StepResult)
Q_DECLARE_METATYPE(hl::app::AdapterInfo)
Q_DECLARE_METATYPE(hl::Run)
Q_DECLARE_METATYPE(hl::views::HiddenPattern)
