// libFuzzer target for the trace importer (issue 18 item 1): any input must either import into a
// Recording whose records have the sizes of its config (what the views index with), or throw
// LoadError; never hang, never allocate past the declared data. Seeds: tests/fuzz/corpus/trace
// (valid traces and one-defect-away ones, written by tests/fuzz/make_seeds.py).
// Run: ./fuzz_trace -max_total_time=60 -rss_limit_mb=2048 corpus_dir tests/fuzz/corpus/trace
#include <cstdint>
#include <cstdlib>

#include "engine/core/error.h"
#include "engine/model/layer_schedule.h"
#include "sessions/trace_import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const hl::Recording rec = hl::parse_trace(data, size, "fuzz.safetensors");
    const hl::JambaConfig& c = rec.config;
    if (rec.runs.size() != 1) std::abort();
    const int64_t An = hl::LayerSchedule::from_config(c).num_attention(), nh = c.num_attention_heads, L = c.num_hidden_layers;
    const int64_t nReg = rec.runs[0].settings.registers_used;
    int64_t t = 0;
    for (const hl::TokenTrace& r : rec.runs[0].records) {
      if (r.token_id < 0 || r.token_id >= c.vocab_size) std::abort();
      if (!r.logits.empty() && static_cast<int64_t>(r.logits.size()) != c.vocab_size) std::abort();
      if (static_cast<int64_t>(r.rank1_distance.size()) != L + 1) std::abort();
      if (!r.attn_entropy.empty() && static_cast<int64_t>(r.attn_entropy.size()) != An * nh) std::abort();
      if (!r.attn_rows.empty() && static_cast<int64_t>(r.attn_rows.size()) != An * nh * (nReg + t + 2)) std::abort();
      if (r.nonfinite_layer < -1 || r.nonfinite_layer > L + 1) std::abort();  // L: final norm, L + 1: LM head
      for (int32_t e : r.router_topk)
        if (e < 0 || e >= c.num_experts) std::abort();
      ++t;
    }
  } catch (const hl::LoadError&) {
  }
  return 0;
}
