// Checkpoint and adapter identity for sessions: which weights a recording came from, so that a
// session reopened months later can say whether the checkpoint at hand is the same one.
// The weights hash is a fingerprint (headers plus a bounded sample of bytes), not a full-file digest.
#pragma once
#include <string>

#include "sessions/recording.h"

namespace hl {

class Checkpoint;
class SafetensorsFile;

// Bytes of each tensor the weights hash reads: the whole tensor up to 64 KiB, else 16 evenly spaced
// 4 KiB chunks (the first at offset 0, the last ending at the tensor's end).
constexpr uint64_t kIdentityChunkBytes = 4096;
constexpr int kIdentityChunks = 16;

// sha256 over, for every tensor in name order: "name\0dtype\0d0,d1,...\0nbytes\0" followed by the
// sampled bytes. Independent of sharding and of the order of tensors in the files.
std::string weights_hash(const Checkpoint& ckpt);
// The same over the tensors of one safetensors file (adapters).
std::string weights_hash(const SafetensorsFile& file);

// folder (absolute), folder name, config.json sha256, weights hash.
CheckpointIdentity identify_checkpoint(const Checkpoint& ckpt);
CheckpointIdentity identify_checkpoint(const std::string& dir);  // opens it (throws LoadError)

// "DIR config_sha256=HEX weights_hash=HEX" of a PEFT adapter folder (throws LoadError).
std::string adapter_identity(const std::string& dir);

// Empty when `now` is the checkpoint the recording was made with (config and weights hashes equal),
// else a sentence saying what differs (for "continue stepping" in the app).
std::string identity_mismatch(const CheckpointIdentity& recorded, const CheckpointIdentity& now);

}  // namespace hl
