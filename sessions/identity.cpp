// Checkpoint / adapter identity (identity.h): sha256 fingerprints of config.json and of the tensors
// (headers plus a bounded sample of bytes), computed on the memory-mapped files.
// Reference: FIPS 180-4 via engine/core/sha256.h; the sampling scheme is this project's (README).
#include "sessions/identity.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>

#include "engine/core/sha256.h"
#include "engine/io/adapter.h"
#include "engine/io/checkpoint.h"
#include "engine/io/json_util.h"
#include "engine/io/safetensors.h"

namespace hl {

namespace {

void hash_tensor(Sha256& h, const TensorInfo& t) {
  std::string head = t.name;
  head.push_back('\0');
  head += dtype_name(t.dtype);
  head.push_back('\0');
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (i) head.push_back(',');
    head += std::to_string(t.shape[i]);
  }
  head.push_back('\0');
  head += std::to_string(t.nbytes());
  head.push_back('\0');
  h.update(head.data(), head.size());
  const uint64_t n = t.nbytes();
  if (n <= kIdentityChunkBytes * kIdentityChunks) {
    if (n) h.update(t.data, n);
    return;
  }
  for (int c = 0; c < kIdentityChunks; ++c) {
    const uint64_t off = (n - kIdentityChunkBytes) * static_cast<uint64_t>(c) / (kIdentityChunks - 1);
    h.update(t.data + off, kIdentityChunkBytes);
  }
}

std::string hash_sorted(std::vector<const TensorInfo*> ts) {
  std::sort(ts.begin(), ts.end(), [](const TensorInfo* a, const TensorInfo* b) { return a->name < b->name; });
  Sha256 h;
  for (const TensorInfo* t : ts) hash_tensor(h, *t);
  return h.hex_digest();
}

std::string absolute(const std::string& dir) {
  char buf[PATH_MAX];
  return ::realpath(dir.c_str(), buf) ? std::string(buf) : dir;
}

}  // namespace

std::string weights_hash(const Checkpoint& ckpt) {
  return hash_sorted(ckpt.all_tensors());
}

std::string weights_hash(const SafetensorsFile& file) {
  std::vector<const TensorInfo*> ts;
  for (const TensorInfo& t : file.tensors()) ts.push_back(&t);
  return hash_sorted(ts);
}

CheckpointIdentity identify_checkpoint(const Checkpoint& ckpt) {
  CheckpointIdentity id;
  id.folder = absolute(ckpt.dir());
  id.name = base_name(id.folder);
  id.config_sha256 = ckpt.config_sha256();
  id.weights_hash = weights_hash(ckpt);
  return id;
}

CheckpointIdentity identify_checkpoint(const std::string& dir) {
  return identify_checkpoint(Checkpoint::open(dir));
}

std::string adapter_identity(const std::string& dir) {
  const std::string folder = absolute(dir);
  const std::string cfg =
      read_file_limited(folder + "/" + Adapter::kConfigName, AdapterConfig::kMaxBytes, Adapter::kConfigName);
  const SafetensorsFile w = SafetensorsFile::open(folder + "/" + Adapter::kWeightsName);
  return folder + " config_sha256=" + sha256_hex(cfg.data(), cfg.size()) + " weights_hash=" + weights_hash(w);
}

std::string identity_mismatch(const CheckpointIdentity& recorded, const CheckpointIdentity& now) {
  std::string why;
  if (recorded.config_sha256 != now.config_sha256) {
    why = "config.json differs (sha256 " + recorded.config_sha256.substr(0, 12) + "… recorded, " +
          now.config_sha256.substr(0, 12) + "… now)";
  }
  if (recorded.weights_hash != now.weights_hash) {
    why += std::string(why.empty() ? "" : "; ") + "the weights differ (hash " + recorded.weights_hash.substr(0, 12) +
           "… recorded, " + now.weights_hash.substr(0, 12) + "… now)";
  }
  return why;
}

}  // namespace hl
