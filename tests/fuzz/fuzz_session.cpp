// libFuzzer target for the session reader (issue 6 item 6, issue 10 item 1): any input must either
// load into a Recording whose records match its config, or throw LoadError. Seeds:
// tests/fuzz/corpus/session (valid and one-edit-away files, written by `hl-bench-session --write-corpus`).
// Build: clang++-14 -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -I. tests/fuzz/fuzz_session.cpp
//        sessions/session_{reader,layout}.cpp <engine core + io sources> -lsentencepiece
// Run:   ./fuzz_session -max_total_time=60 -rss_limit_mb=2048 corpus_dir tests/fuzz/corpus/session
#include <cstdint>
#include <cstdlib>

#include "engine/core/error.h"
#include "sessions/session_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const hl::Recording rec = hl::parse_session(data, size, "fuzz.hlsession");
    const int64_t V = rec.config.vocab_size;
    for (const hl::Run& run : rec.runs) {
      for (const hl::TokenTrace& r : run.records) {
        // What the views index with must be in range.
        if (r.token_id < 0 || r.token_id >= V) std::abort();
        if (!r.logits.empty() && static_cast<int64_t>(r.logits.size()) != V) std::abort();
        for (int32_t e : r.router_topk)
          if (e < 0 || e >= rec.config.num_experts) std::abort();
      }
    }
  } catch (const hl::LoadError&) {
  }
  return 0;
}
