// Session files: one safetensors file holding a Recording — a JSON manifest in `__metadata__`
// ("hybridlens_session") and the per-token records of every run stacked as `runs/<label>/<field>`
// tensors shaped as in trace-format.md §3. Layout and sizes: docs in README.md ("Session files").
// Not the trace file (engine/trace/trace_file.h): a session adds settings, identity and A/B runs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/io/input_limits.h"
#include "sessions/recording.h"

namespace hl {

constexpr int kSessionFormatVersion = 1;
constexpr const char* kSessionMetadataKey = "hybridlens_session";  // __metadata__ key of the manifest
// __metadata__ key of the manifest's checksum (XXH3-64 of the manifest text, 16 hex digits); the
// tensors' checksums are in the manifest ("checksums"). Files written before them have neither.
constexpr const char* kSessionManifestChecksumKey = "hybridlens_session_xxh3";
constexpr const char* kSessionChecksumAlgorithm = "xxh3_64";
constexpr const char* kSessionFormatName = "hybridlens-session";   // manifest "format"
constexpr const char* kSessionExtension = ".hlsession";

// Bounds a reader enforces on declared sizes before allocating anything.
constexpr int64_t kSessionMaxTokens = limits::kMaxTokens;  // tokens per run and in `tokens`
constexpr int64_t kSessionMaxRuns = 64;
constexpr int64_t kSessionMaxRegisters = limits::kMaxRegisters;
constexpr size_t kSessionMaxLabelChars = 32;

struct SessionSaveOptions {
  // logits (T, V): F32 keeps them bit-exact (the default); F16 / BF16 halve the largest dense tensor
  // for big vocabularies.
  DType logits_dtype = DType::F32;
  // ssm_delta, ssm_retained (T, M_n, Di) and attn_rows (T, A_n, nh, n_reg + T + 1): F16 by default
  // (a tensor holding a finite value beyond F16's range is stored F32 instead); BF16 or F32 allowed.
  DType full_dtype = DType::F16;
};

// Serialises a recording into session-file bytes. Throws Error when the recording is inconsistent
// (a record whose vector has the wrong size for the config, an invalid or repeated run label).
std::vector<uint8_t> serialize_session(const Recording& rec, const SessionSaveOptions& opts = {});

// Writes atomically (temporary file in the same folder, fsync, rename): a crash mid-save leaves the
// previous file intact. Sets nothing in `rec`; fills `created` in the file when rec.created is empty.
void save_session(const std::string& path, const Recording& rec, const SessionSaveOptions& opts = {});

// Reads a session file (untrusted input). Every manifest field and tensor is checked against the
// manifest's config before anything is allocated; any problem throws LoadError naming the file, the
// object and the allowed range. The manifest's and every tensor's checksum are verified when the
// file has them ("checksum mismatch" naming the tensor); files without them still open. Fields
// stored F32/I32/I64 come back bit-exact; F16/BF16 ones widened.
Recording load_session(const std::string& path);
// The same on an in-memory buffer (fuzzers, tests); `name` names it in messages.
Recording parse_session(const uint8_t* bytes, uint64_t size, const std::string& name);

// What a "recent sessions" list shows, read from the manifest alone (no tensor data is touched).
struct SessionSummary {
  int format_version = 0;
  std::string created;
  CheckpointIdentity checkpoint;
  std::string prompt;
  int64_t n_tokens = 0;
  std::vector<std::string> run_labels;
  uint64_t file_bytes = 0;
};
SessionSummary read_session_summary(const std::string& path);  // throws LoadError

}  // namespace hl
