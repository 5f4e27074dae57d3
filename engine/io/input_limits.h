// The bounds every reader of untrusted files puts on declared sizes before allocating: config.json
// (config.cpp), session files (sessions/session_reader.cpp) and trace files (sessions/trace_import.cpp)
// share them, so a trace cannot claim what a config or a session could not. Not the memory check
// (engine/core/sys_memory.h), which bounds the total after these.
#pragma once
#include <cstdint>

namespace hl::limits {

constexpr int64_t kMaxVocab = int64_t{1} << 24;      // vocab_size
constexpr int64_t kMaxHidden = 65536;                // hidden_size; attention heads <= hidden_size
constexpr int64_t kMaxLayers = 1024;                 // num_hidden_layers
constexpr int64_t kMaxExperts = 1024;                // num_experts
constexpr int64_t kMaxMambaExpand = 64;              // mamba_expand: Di = expand * hidden_size
constexpr int64_t kMaxTokens = int64_t{1} << 20;     // tokens of one run (sessions, traces)
constexpr int64_t kMaxRegisters = int64_t{1} << 16;  // register tokens of one run

}  // namespace hl::limits
