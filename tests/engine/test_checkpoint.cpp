// Checkpoint folders (trace-format.md §1): single file and shards, symlinked files, config hash,
// tokenizer, progress and cancel, and the folder-level corruption table (shard paths leaving the
// folder, duplicates across shards, index and shards disagreeing).
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "engine/core/sha256.h"
#include "engine/io/checkpoint.h"
#include "test_util.h"

using namespace hl;
using hl::test::TempDir;
using hl::test::TestTensor;

namespace {

// Writes config.json, two shards (first half / second half of the tensors) and the index.
// `edit_map` may change the weight_map before it is written.
void write_sharded(const std::string& dir, const std::function<void(nlohmann::json&)>& edit_map = {}) {
  JambaConfig c = hl::test::tiny_config();
  std::vector<TestTensor> ts = hl::test::tiny_tensors(c);
  size_t half = ts.size() / 2;
  std::vector<TestTensor> a(ts.begin(), ts.begin() + static_cast<std::ptrdiff_t>(half));
  std::vector<TestTensor> b(ts.begin() + static_cast<std::ptrdiff_t>(half), ts.end());
  hl::test::write_text(dir + "/config.json", config_to_json(c));
  hl::test::write_safetensors(dir + "/model-00001-of-00002.safetensors", a);
  hl::test::write_safetensors(dir + "/model-00002-of-00002.safetensors", b);
  nlohmann::json wm = nlohmann::json::object();
  for (const TestTensor& t : a) wm[t.name] = "model-00001-of-00002.safetensors";
  for (const TestTensor& t : b) wm[t.name] = "model-00002-of-00002.safetensors";
  if (edit_map) edit_map(wm);
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", wm}};
  hl::test::write_text(dir + "/model.safetensors.index.json", index.dump(2));
}

size_t tiny_tensor_count() {
  return hl::test::tiny_tensors(hl::test::tiny_config()).size();
}

}  // namespace

TEST(Checkpoint, SingleFile_OpensAndHashesConfig) {
  TempDir d;
  hl::test::write_tiny_checkpoint(d.path, hl::test::tiny_config());
  Checkpoint ck = Checkpoint::open(d.path + "/");
  EXPECT_EQ(ck.dir(), d.path);
  std::string text = config_to_json(hl::test::tiny_config());
  EXPECT_EQ(ck.config_sha256(), sha256_hex(text.data(), text.size()));
  EXPECT_EQ(ck.config().hidden_size, 16);
  EXPECT_EQ(ck.all_tensors().size(), tiny_tensor_count());
  ASSERT_NE(ck.find("model.layers.0.mamba.A_log"), nullptr);
  EXPECT_EQ(ck.find("model.layers.0.mamba.A_log")->shape, (std::vector<int64_t>{32, 4}));
  EXPECT_EQ(ck.find("nope"), nullptr);
  uint64_t bytes = 0;
  for (const TensorInfo* t : ck.all_tensors()) bytes += t->nbytes();
  EXPECT_EQ(ck.total_tensor_bytes(), bytes);
  EXPECT_EQ(ck.files(), std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(ck.mappings().size(), 1u);
  EXPECT_EQ(ck.tokenizer_path(), "");
  hl::test::write_text(d / "tokenizer.model", "x");
  EXPECT_EQ(ck.tokenizer_path(), d / "tokenizer.model");
}

TEST(Checkpoint, MoveKeepsTensorPointersValid) {
  TempDir d;
  hl::test::write_tiny_checkpoint(d.path, hl::test::tiny_config());
  Checkpoint a = Checkpoint::open(d.path);
  const TensorInfo* t = a.find("lm_head.weight");
  Checkpoint b = std::move(a);
  EXPECT_EQ(b.find("lm_head.weight"), t);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{64, 16}));
}

TEST(Checkpoint, Sharded_OpensWithProgress) {
  TempDir d;
  write_sharded(d.path);
  std::vector<std::pair<int64_t, int64_t>> calls;
  LoadProgress p;
  p.callback = [&](int64_t done, int64_t total, const std::string&) {
    calls.emplace_back(done, total);
    return true;
  };
  Checkpoint ck = Checkpoint::open(d.path, p);
  EXPECT_EQ(ck.all_tensors().size(), tiny_tensor_count());
  EXPECT_EQ(ck.files().size(), 2u);
  ASSERT_GE(calls.size(), 3u);
  EXPECT_EQ(calls.front(), (std::pair<int64_t, int64_t>{0, 3}));
  EXPECT_EQ(calls.back(), (std::pair<int64_t, int64_t>{3, 3}));
}

TEST(Checkpoint, ProgressReturningFalse_ThrowsCancelled) {
  TempDir d;
  write_sharded(d.path);
  LoadProgress p;
  p.callback = [](int64_t done, int64_t, const std::string&) { return done < 1; };
  EXPECT_THROW(Checkpoint::open(d.path, p), Cancelled);
}

TEST(Checkpoint, SymlinkedFiles_Allowed) {
  // The Hugging Face cache layout: snapshots/<rev>/ holds links into blobs/.
  TempDir d;
  std::string blobs = d / "blobs", snap = d / "snap";
  ASSERT_EQ(::mkdir(blobs.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(snap.c_str(), 0755), 0);
  write_sharded(blobs);
  for (const char* f : {"config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors",
                        "model-00002-of-00002.safetensors"}) {
    ASSERT_EQ(::symlink(("../blobs/" + std::string(f)).c_str(), (snap + "/" + f).c_str()), 0);
  }
  Checkpoint ck = Checkpoint::open(snap);
  EXPECT_EQ(ck.all_tensors().size(), tiny_tensor_count());
}

// ---- corruption table: folders -----------------------------------------------------------------

TEST(CheckpointCorrupt, NotAFolder) {
  TempDir d;
  hl::test::write_text(d / "file", "x");
  EXPECT_LOAD_ERROR(Checkpoint::open(d / "file"), "not a folder");
  EXPECT_LOAD_ERROR(Checkpoint::open(d / "missing"), "cannot open the checkpoint folder");
}

TEST(CheckpointCorrupt, NoConfig) {
  TempDir d;
  EXPECT_LOAD_ERROR(Checkpoint::open(d.path), "no config.json");
}

TEST(CheckpointCorrupt, NoWeights) {
  TempDir d;
  hl::test::write_text(d / "config.json", config_to_json(hl::test::tiny_config()));
  EXPECT_LOAD_ERROR(Checkpoint::open(d.path), "no model.safetensors or model.safetensors.index.json");
}

TEST(CheckpointCorrupt, InvalidConfigNamesConfigJson) {
  TempDir d;
  hl::test::write_tiny_checkpoint(d.path, hl::test::tiny_config());
  hl::test::write_text(d / "config.json", R"({"model_type":"jamba","hidden_size":"big"})");
  EXPECT_LOAD_ERROR(Checkpoint::open(d.path),
                    "config.json: field 'hidden_size': expected an integer in [1, 65536], got string \"big\"");
}

TEST(CheckpointCorrupt, ShardPathLeavesFolder) {
  const std::pair<const char*, const char*> cases[] = {
      {"../x.safetensors", "shard '../x.safetensors' contains '..'"},
      {"/etc/passwd", "shard '/etc/passwd' is an absolute path"},
      {"sub/x.safetensors", "shard 'sub/x.safetensors' contains a path separator"},
      {"sub\\x.safetensors", "contains a path separator"},
      {"", "shard '' is empty"}};
  for (const auto& [name, part] : cases) {
    TempDir d;
    std::string shard = name;
    write_sharded(d.path, [&](nlohmann::json& wm) { wm["model.embed_tokens.weight"] = shard; });
    EXPECT_LOAD_ERROR(Checkpoint::open(d.path), part);
    EXPECT_LOAD_ERROR(Checkpoint::open(d.path), "must be a plain file name in the checkpoint folder");
  }
}

TEST(CheckpointCorrupt, DuplicateTensorAcrossShards) {
  TempDir d;
  write_sharded(d.path);
  // Rewrite shard 2 with an extra copy of a tensor that shard 1 already holds.
  JambaConfig c = hl::test::tiny_config();
  std::vector<TestTensor> ts = hl::test::tiny_tensors(c);
  std::vector<TestTensor> b(ts.begin() + static_cast<std::ptrdiff_t>(ts.size() / 2), ts.end());
  b.push_back(ts[0]);
  hl::test::write_safetensors(d / "model-00002-of-00002.safetensors", b);
  EXPECT_LOAD_ERROR(Checkpoint::open(d.path), "duplicate tensor name '" + ts[0].name + "': it is also in model-00001");
}

TEST(CheckpointCorrupt, IndexNamesTensorMissingFromShard) {
  TempDir d;
  write_sharded(d.path, [](nlohmann::json& wm) { wm["model.ghost.weight"] = "model-00001-of-00002.safetensors"; });
  EXPECT_LOAD_ERROR(Checkpoint::open(d.path),
                    "tensor 'model.ghost.weight' is mapped to 'model-00001-of-00002.safetensors', but that file has no "
                    "tensor of that name");
}

TEST(CheckpointCorrupt, IndexMapsTensorToWrongShard) {
  TempDir d;
  write_sharded(d.path,
                [](nlohmann::json& wm) { wm["model.embed_tokens.weight"] = "model-00002-of-00002.safetensors"; });
  EXPECT_LOAD_ERROR(Checkpoint::open(d.path), "tensor 'model.embed_tokens.weight' is mapped to 'model-00002");
}

TEST(CheckpointCorrupt, ShardTensorNotInIndex) {
  TempDir d;
  write_sharded(d.path, [](nlohmann::json& wm) { wm.erase("lm_head.weight"); });
  EXPECT_LOAD_ERROR(Checkpoint::open(d.path), "tensor 'lm_head.weight' is not listed in the weight_map");
}

TEST(CheckpointCorrupt, IndexNamesMissingShardFile) {
  TempDir d;
  write_sharded(d.path, [](nlohmann::json& wm) { wm["lm_head.weight"] = "model-00003-of-00002.safetensors"; });
  EXPECT_LOAD_ERROR(Checkpoint::open(d.path),
                    "shard 'model-00003-of-00002.safetensors' named in weight_map is not a file");
}

TEST(CheckpointCorrupt, IndexMalformed) {
  TempDir d;
  write_sharded(d.path);
  hl::test::write_text(d / "model.safetensors.index.json", R"({"metadata": {}})");
  EXPECT_LOAD_ERROR(Checkpoint::open(d.path), "model.safetensors.index.json: missing field 'weight_map'");
  hl::test::write_text(d / "model.safetensors.index.json", R"({"weight_map": {"a": 3}})");
  EXPECT_LOAD_ERROR(Checkpoint::open(d.path),
                    "weight_map entry for tensor 'a' must be a file name string, got integer");
  hl::test::write_text(d / "model.safetensors.index.json", R"({"weight_map": {"a": "x", "a": "y"}})");
  EXPECT_LOAD_ERROR(Checkpoint::open(d.path), "key 'a' appears twice");
  hl::test::write_text(d / "model.safetensors.index.json", R"({"weight_map": )");
  EXPECT_LOAD_ERROR(Checkpoint::open(d.path), "model.safetensors.index.json: invalid JSON");
}

TEST(CheckpointCorrupt, CorruptShardNamesTheShard) {
  TempDir d;
  write_sharded(d.path);
  hl::test::write_text(d / "model-00002-of-00002.safetensors", "garbage!garbage!");
  EXPECT_LOAD_ERROR(Checkpoint::open(d.path), "model-00002-of-00002.safetensors: header length");
}
