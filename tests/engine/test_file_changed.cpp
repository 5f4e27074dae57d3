// A checkpoint file changed while a model loaded from it runs (issue 18 item 3). The weights live
// in memory the process owns (MappedFile::open_read), so truncating or rewriting the file cannot
// fault a run (it used to be SIGBUS through the mapping); every forward() compares the files'
// (device, inode, size, mtime) with those at load and ends with one line naming the file.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/core/error.h"
#include "engine/io/checkpoint.h"
#include "engine/model/loader.h"
#include "tests/engine/test_util.h"

using namespace hl;
namespace fs = std::filesystem;

namespace {

// Loads a tiny checkpoint and feeds one token; the caller changes the file, then steps again.
struct Loaded {
  test::TempDir dir;
  std::shared_ptr<Model> model;
  std::unique_ptr<Backend> backend;
  std::vector<TokenTrace> recs;
  std::string shard() const { return dir / "model.safetensors"; }
  Loaded() {
    test::write_tiny_checkpoint(dir.path, test::tiny_config());
    model = load_model(dir.path);
    backend = make_backend("cpu", model);
    backend->start(RunOptions{});
    int32_t id = 1;
    backend->forward(&id, 1, &recs);
  }
  // The message of the Error the next step throws ("" when it throws none).
  std::string step_error() {
    int32_t id = 2;
    try {
      backend->forward(&id, 1, &recs);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  // Every weight byte is still readable (a view into the file would fault here after a truncation).
  double checksum() const {
    double s = 0;
    for (const Mat* m : model->matrices()) {
      const uint8_t* p = static_cast<const uint8_t*>(m->data);
      for (int64_t i = 0; i < m->bytes(); i += 61) s += p[i];
    }
    return s;
  }
};

}  // namespace

TEST(FileChanged, TruncatedAfterLoad_StepEndsWithOneLineNamingTheFile_WeightsStillReadable) {
  Loaded l;
  const double before = l.checksum();
  const uintmax_t size = fs::file_size(l.shard());
  fs::resize_file(l.shard(), 100);
  EXPECT_EQ(l.checksum(), before);  // no SIGBUS: the run does not read the file
  EXPECT_EQ(l.step_error(), l.shard() + ": changed on disk since it was loaded (size " + std::to_string(size) +
                                " -> 100 bytes); reload the checkpoint to go on");
  EXPECT_EQ(l.recs.size(), 1u);  // the step before stays, none half-made
  EXPECT_EQ(l.backend->position(), 1);
}

TEST(FileChanged, OverwrittenInPlaceSameSize_Modified) {
  Loaded l;
  const uintmax_t size = fs::file_size(l.shard());
  {
    std::vector<uint8_t> junk(static_cast<size_t>(size), 0x7f);
    test::write_bytes(l.shard(), junk);  // same inode, same size, new bytes
  }
  // Some file systems keep a coarse mtime: make the change visible regardless.
  const auto t = fs::last_write_time(l.shard());
  fs::last_write_time(l.shard(), t + std::chrono::seconds(2));
  EXPECT_EQ(l.step_error(),
            l.shard() + ": changed on disk since it was loaded (modified); reload the checkpoint to go on");
}

TEST(FileChanged, ReplacedByRename_AndRemoved_EachSaysSo) {
  Loaded l;
  fs::create_directories(l.dir / "other");
  test::write_tiny_checkpoint(l.dir / "other", test::tiny_config());
  fs::rename(l.dir / "other/model.safetensors", l.shard());  // what a download tool does
  EXPECT_NE(l.step_error().find(": changed on disk since it was loaded (replaced by another file)"), std::string::npos);
  fs::remove(l.shard());
  EXPECT_NE(l.step_error().find(": changed on disk since it was loaded (removed)"), std::string::npos);
}

TEST(FileChanged, UnchangedFile_StepsOn) {
  Loaded l;
  EXPECT_EQ(l.step_error(), "");
  EXPECT_EQ(l.recs.size(), 2u);
}

TEST(FileChanged, TruncatedWhileLoading_LoadErrorNotSignal) {
  test::TempDir dir;
  test::write_tiny_checkpoint(dir.path, test::tiny_config());
  // Headers read (Checkpoint::open with Read), then the shard shrinks before the weights are read.
  Checkpoint ck = Checkpoint::open(dir.path, {}, FileAccess::Read);
  const std::string shard = dir / "model.safetensors";
  const uintmax_t size = fs::file_size(shard);
  fs::resize_file(shard, size / 2);
  const std::string m = test::load_error_of([&] { bind_model(ck); });
  EXPECT_NE(m.find(shard + ": changed on disk while loading (ends at byte " + std::to_string(size / 2) + ", " +
                   std::to_string(size) + " expected)"),
            std::string::npos)
      << m;
}

TEST(FileChanged, ReadAccess_SameTensorsAsTheMapping) {
  test::TempDir dir;
  test::write_tiny_checkpoint(dir.path, test::tiny_config());
  const std::string shard = dir / "model.safetensors";
  SafetensorsFile mapped = SafetensorsFile::open(shard);
  SafetensorsFile read = SafetensorsFile::open(shard, FileAccess::Read);
  read.mapping()->read_rest();
  ASSERT_EQ(read.tensors().size(), mapped.tensors().size());
  for (size_t i = 0; i < mapped.tensors().size(); ++i) {
    const TensorInfo &a = mapped.tensors()[i], &b = read.tensors()[i];
    EXPECT_EQ(a.name, b.name);
    ASSERT_EQ(a.nbytes(), b.nbytes());
    EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes()), 0) << a.name;
  }
  EXPECT_TRUE(read.mapping()->stamp().same_as(mapped.mapping()->stamp()));
  EXPECT_EQ(read.mapping()->stamp().change(), "");
}
