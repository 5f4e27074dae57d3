// Resource limits of issue 10 (DESIGN.md reliability rules): the memory budget refuses a checkpoint
// before binding it and names the numbers, loading can be cancelled at every stage without harming
// a model already loaded, and RunOptions::max_context bounds a run with a message saying how to
// raise it, leaving the run as it was. Not the reader checks themselves: test_loader.cpp, test_checkpoint.cpp.
#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/io/checkpoint.h"
#include "engine/model/loader.h"
#include "test_util.h"

using namespace hl;
using hl::test::TempDir;

namespace {

// The message of the hl::Error that fn throws ("" and a failure when none or another type).
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected hl::Error, got: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected hl::Error, nothing was thrown";
  return "";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::shared_ptr<Model> tiny_model(const TempDir& d, int64_t max_positions = 262144) {
  JambaConfig c = hl::test::tiny_config();
  c.max_position_embeddings = max_positions;
  hl::test::write_tiny_checkpoint(d.path, c);
  return load_model(d.path);
}

}  // namespace

// ---- memory budget ------------------------------------------------------------------------------

TEST(MemoryBudget, TooSmall_RefusedWithNeededAndBudget_EnoughLoads) {
  TempDir d;
  hl::test::write_tiny_checkpoint(d.path, hl::test::tiny_config());
  const uint64_t tensors = Checkpoint::open(d.path).total_tensor_bytes();
  LoadOptions o;
  o.memory_budget_bytes = tensors;  // the tensors alone fit, the widened vectors do not
  const std::string msg = error_of([&] { load_model(d.path, o); });
  EXPECT_TRUE(contains(msg, "the model needs ")) << msg;
  EXPECT_TRUE(contains(msg, " of tensors + ")) << msg;
  EXPECT_TRUE(contains(msg, " of widened vectors), more than the memory budget of ")) << msg;
  EXPECT_TRUE(contains(msg, base_name(d.path) + ": ")) << msg;  // names the checkpoint
  o.memory_budget_bytes = 2 * tensors + (1 << 20);
  EXPECT_NO_THROW(load_model(d.path, o));
}

TEST(MemoryBudget, DefaultPhysicalRam_LoadsSmallModel_ExplicitBudgetInMessage) {
  TempDir d;
  hl::test::write_tiny_checkpoint(d.path, hl::test::tiny_config());
  LoadOptions o;  // budget 0: the memory available (engine/core/sys_memory.h)
  EXPECT_NO_THROW(load_model(d.path, o));
  o.memory_budget_bytes = 1;
  const std::string msg = error_of([&] { load_model(d.path, o); });
  EXPECT_TRUE(contains(msg, "more than the memory budget of 1 bytes")) << msg;
  EXPECT_FALSE(contains(msg, "physical RAM")) << msg;  // an explicit budget is not called RAM
}

// ---- cancellation -------------------------------------------------------------------------------

TEST(LoadCancel, EveryStage_ThrowsCancelled_OtherModelUnharmed) {
  TempDir a, b;
  std::shared_ptr<Model> loaded = tiny_model(a);
  std::unique_ptr<Backend> run = make_backend("cpu", loaded);
  run->start(RunOptions{});
  std::vector<TokenTrace> before;
  const int32_t ids[3] = {1, 5, 9};
  run->forward(ids, 3, &before);

  hl::test::write_tiny_checkpoint(b.path, hl::test::tiny_config());
  // Every progress call of a full load, in order.
  std::vector<std::string> stages;
  LoadOptions record;
  record.progress.callback = [&](int64_t, int64_t, const std::string& what) {
    stages.push_back(what);
    return true;
  };
  ASSERT_NE(load_model(b.path, record), nullptr);
  ASSERT_GE(stages.size(), 4u);  // checking the file, the names, binding layers, bound
  for (size_t stop = 0; stop < stages.size(); ++stop) {
    size_t calls = 0;
    LoadOptions o;
    o.progress.callback = [&](int64_t, int64_t, const std::string&) { return calls++ < stop; };
    EXPECT_THROW(load_model(b.path, o), Cancelled) << "cancelled at '" << stages[stop] << "'";
    EXPECT_EQ(calls, stop + 1) << "the load went on after the callback said stop at '" << stages[stop] << "'";
  }
  // The model loaded before is untouched: the same tokens give the same logits.
  run->start(RunOptions{});
  std::vector<TokenTrace> after;
  run->forward(ids, 3, &after);
  ASSERT_EQ(after.size(), before.size());
  for (size_t t = 0; t < after.size(); ++t) EXPECT_EQ(after[t].logits, before[t].logits) << "token " << t;
}

// ---- context length -----------------------------------------------------------------------------

TEST(MaxContext, Default_IsMaxPositionEmbeddings_MessageSaysHowToRaise) {
  TempDir d;
  std::unique_ptr<Backend> b = make_backend("cpu", tiny_model(d, 6));
  b->start(RunOptions{});
  std::vector<TokenTrace> recs;
  for (int32_t t = 0; t < 6; ++t) b->forward(&t, 1, &recs);
  const int32_t next = 7;
  const std::string msg = error_of([&] { b->forward(&next, 1, &recs); });
  EXPECT_TRUE(contains(msg, "context length limit reached: the run holds 6 tokens")) << msg;
  EXPECT_TRUE(contains(msg, "limit of 6 tokens")) << msg;
  EXPECT_TRUE(contains(msg, "max_position_embeddings")) << msg;
  EXPECT_TRUE(contains(msg, "--max-context")) << msg;
  EXPECT_EQ(b->position(), 6);  // nothing fed, no partial record
  EXPECT_EQ(recs.size(), 6u);
  b->start(RunOptions{});  // a new run starts from zero
  EXPECT_NO_THROW(b->forward(&next, 1, &recs));
}

TEST(MaxContext, Setting_OverridesConfig_PrefillCheckedWhole) {
  TempDir d;
  std::unique_ptr<Backend> b = make_backend("cpu", tiny_model(d, 6));
  RunOptions o;
  o.max_context = 3;
  b->start(o);
  std::vector<TokenTrace> recs;
  const int32_t ids[4] = {1, 2, 3, 4};
  const std::string msg = error_of([&] { b->forward(ids, 4, &recs); });
  EXPECT_TRUE(contains(msg, "4 more would pass the limit of 3 tokens (the max_context setting)")) << msg;
  EXPECT_EQ(b->position(), 0);
  EXPECT_TRUE(recs.empty());
  b->forward(ids, 3, &recs);
  EXPECT_EQ(b->position(), 3);
  EXPECT_THROW(b->forward(ids, 1, &recs), Error);

  o.max_context = 10;  // above max_position_embeddings: the setting wins
  b->start(o);
  recs.clear();
  for (int32_t t = 0; t < 10; ++t) b->forward(&t, 1, &recs);
  EXPECT_EQ(recs.size(), 10u);
  EXPECT_THROW(b->forward(ids, 1, &recs), Error);
}

TEST(MaxContext, OutOfRangeSetting_Refused) {
  const JambaConfig c = hl::test::tiny_config();
  RunOptions o;
  o.max_context = -1;
  EXPECT_TRUE(contains(error_of([&] { check_context(o, c, 0, 1); }), "max_context -1 is out of range"));
  o.max_context = int64_t{std::numeric_limits<int32_t>::max()} + 1;
  EXPECT_THROW(check_context(o, c, 0, 1), Error);
  o.max_context = 0;
  EXPECT_EQ(context_limit(o, c), c.max_position_embeddings);
  EXPECT_NO_THROW(check_context(o, c, c.max_position_embeddings - 1, 1));
  EXPECT_THROW(check_context(o, c, c.max_position_embeddings, 1), Error);
  EXPECT_THROW(check_context(o, c, 0, std::numeric_limits<int64_t>::max()), Error);  // no overflow
}
