// A recording: what a researcher keeps from an investigation — checkpoint identity, settings, the
// tokens and every per-token record of one or more runs (A/B). Views draw from it; session files
// store it. Plain C++ on the engine (no Qt). Reference: DESIGN.md architecture, issue 6.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/io/config.h"
#include "engine/model/sampling.h"
#include "engine/model/token_trace.h"
#include "sessions/record_list.h"

namespace hl {

struct RunSettings {
  bool normalizer_override = false;  // false: as trained
  Normalizer normalizer = Normalizer::Softmax;
  int registers = -1;      // as requested (-1: trained count)
  int registers_used = 0;  // resolved count in this run
  std::string adapter;     // adapter folder merged in, or empty
  std::string backend = "cpu";
  SamplingOptions sampling;
  bool full = true;         // attention rows and per-channel Δ recorded
  int64_t max_context = 0;  // RunOptions::max_context (0: config.json's max_position_embeddings)
};

struct Run {
  std::string label;  // "A", "B", ...
  RunSettings settings;
  RecordList records;  // one per token fed or generated, shared on copy (record_list.h)
  double load_seconds = 0;          // model load time before the run (0 if already loaded)
  int64_t prompt_tokens = 0;        // records [0, prompt_tokens) were fed, the rest generated
  double run_seconds = 0;           // wall time of the whole run (sum of steps plus sampling)
};

struct CheckpointIdentity {
  std::string folder;         // absolute path when recorded
  std::string name;           // folder name
  std::string config_sha256;  // of config.json
  std::string weights_hash;   // sha256 over the tensor headers and a sample of the data (sessions/identity.h)
};

struct Recording {
  CheckpointIdentity checkpoint;
  std::string adapter_identity;  // adapter folder + sha256 of its config, or empty
  std::string weights;           // --weights format the matrices were quantised to ("q8_0"), empty: as stored
  JambaConfig config;            // so views can draw without the checkpoint
  std::string prompt;
  std::vector<int32_t> tokens;  // the tokens fed (prompt and generated) in order
  std::vector<std::string> token_text;
  std::vector<Run> runs;
  std::string created;         // UTC time of the first save, "2025-01-31T12:00:00Z"
  std::string engine_version;  // HL_VERSION of the build that recorded it

  const Run* run(const std::string& label) const {
    for (const Run& r : runs)
      if (r.label == label) return &r;
    return nullptr;
  }
};

}  // namespace hl
