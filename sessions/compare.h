// Token-aligned comparison of two runs (the A/B toggles, or two sessions): per trace field the
// largest and mean |Δ| over the common token prefix and the first differing token, plus top-1
// agreement of the logits. Feeds `hybridlens compare` and the app's compare overlays. No file I/O.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "sessions/recording.h"

namespace hl {

struct FieldDiff {
  std::string field;               // trace-format.md §3 name: "logits", "attn_entropy", ...
  int64_t tokens = 0;              // tokens compared (both runs carry the field there)
  int64_t elements = 0;            // values compared
  double max_abs = 0;              // largest |a − b| over finite pairs
  double mean_abs = 0;             // mean |a − b| over finite pairs
  int64_t max_token = -1;          // token holding max_abs
  int64_t first_diff_token = -1;   // first token where any value differs (bitwise, NaN = NaN); -1: none
  int64_t nonfinite_mismatch = 0;  // pairs where one side is NaN/Inf and the other is not the same
  std::string note;                // how the field was aligned, or why it was skipped
  bool compared() const { return tokens > 0; }
};

struct RunComparison {
  std::string a_label, b_label;
  std::string a_desc, b_desc;  // "64 tokens, normalizer as-trained, 0 registers, backend cpu"
  int64_t a_tokens = 0, b_tokens = 0;
  int64_t common_tokens = 0;          // length of the longest common prefix of token ids
  int64_t first_token_mismatch = -1;  // first t < min(a_tokens, b_tokens) with different ids; -1: none
  int64_t top1_compared = 0, top1_agree = 0;
  int64_t first_top1_disagreement = -1;
  int64_t first_diff_token = -1;      // over every field; -1: the records are identical on the prefix
  std::vector<FieldDiff> fields;      // in trace-format.md order, every field either run carries
  std::vector<std::string> settings;  // "normalizer: as-trained → softmax1", one per differing setting
  // What differs between the two recordings the runs come from (checkpoint identity, adapter, prompt,
  // tokens), one sentence each; empty for two runs of one recording. Filled by compare_recordings.
  std::vector<std::string> warnings;
};

// Compares the records of `a` and `b` over their common token prefix. Fields are compared where the
// per-token sizes agree; attn_rows are aligned on token keys and p_null, so runs with different
// register counts compare too (register columns are skipped and said so in the note).
RunComparison compare_runs(const Run& a, const Run& b);

// The warnings of RunComparison::warnings for runs taken from recordings `a` and `b`: a different
// checkpoint (name, config or weights hash), adapter, prompt text or token ids (issue 17 finding 7).
std::vector<std::string> recording_differences(const Recording& a, const Recording& b);

// Human-readable report (a table) and one JSON object; names label the two sides in the text.
std::string comparison_text(const RunComparison& c, const std::string& a_name, const std::string& b_name);
std::string comparison_json(const RunComparison& c, const std::string& a_name, const std::string& b_name);

}  // namespace hl
