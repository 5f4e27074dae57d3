// The backend registry and the run plan (issue 14 item 5): every registered backend's available /
// describe agree with what make_backend does, `auto` takes the natively available backend of
// lowest rank, an unknown name lists the registered ones; plan_run's register count and limit,
// per-layer normalizer resolution and context bound, and every available backend's start()
// applying them. Label `cpu` (GPU backends are exercised only where a device exists).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "engine/backend/backend_registry.h"
#include "engine/backend/run_plan.h"
#include "engine/core/error.h"
#include "engine/model/loader.h"

namespace hl {
namespace {

std::shared_ptr<const Model> extensions_model() {
  // tests/golden/extensions: 4 layers, attention at 1 and 3 (3 with trained sinks), config
  // normalizer softmax1, 2 trained register rows, max_position_embeddings 4096.
  static const std::shared_ptr<const Model> m = load_model(std::string(HL_GOLDEN_DIR) + "/extensions");
  return m;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(BackendRegistry, EntriesAreNamedOnceAndDescribeTheirDevice) {
  std::set<std::string> names;
  for (const BackendEntry& e : backend_registry()) {
    EXPECT_TRUE(names.insert(e.name).second) << "registered twice: " << e.name;
    EXPECT_NE(std::string(e.name), "auto");
    EXPECT_FALSE(std::string(e.label).empty()) << e.name;
    ASSERT_TRUE(e.available && e.make && e.describe) << e.name;
    EXPECT_FALSE(e.describe().empty()) << e.name;
    if (e.available(true)) EXPECT_TRUE(e.available(false)) << e.name << ": native but not available";
    EXPECT_EQ(find_backend(e.name), &e);
    EXPECT_EQ(backend_is_emulated(e.name), e.available(false) && !e.available(true)) << e.name;
  }
  EXPECT_EQ(std::string(backend_registry().front().name), "cpu");  // the menu's first, always there
  EXPECT_TRUE(backend_registry().front().available(true));
  EXPECT_EQ(find_backend("auto"), nullptr);
  EXPECT_EQ(find_backend("tpu"), nullptr);
}

TEST(BackendRegistry, AvailableBackendsAreTheAvailableEntriesInOrder) {
  std::vector<std::string> want;
  for (const BackendEntry& e : backend_registry())
    if (e.available(false)) want.push_back(e.name);
  EXPECT_EQ(available_backends(), want);
  std::string choices = "auto";
  for (const BackendEntry& e : backend_registry()) choices += std::string(", ") + e.name;
  EXPECT_EQ(backend_choices(), choices);
}

TEST(BackendRegistry, MakeBackendAgreesWithAvailable) {
  auto model = extensions_model();
  for (const BackendEntry& e : backend_registry()) {
    if (e.available(false)) {
      std::unique_ptr<Backend> b;
      try {
        b = make_backend(e.name, model);
      } catch (const BackendFailure& f) {
        ADD_FAILURE() << e.name << " is available but failed to set up: " << f.what();
        continue;
      }
      EXPECT_EQ(b->name(), e.name);
    } else {
      EXPECT_THROW(make_backend(e.name, model), BackendFailure) << e.name << " is unavailable but was made";
    }
  }
}

TEST(BackendRegistry, AutoTakesTheNativeBackendOfLowestRank) {
  const BackendEntry* best = nullptr;
  for (const BackendEntry& e : backend_registry())
    if (e.available(true) && (!best || e.auto_rank < best->auto_rank)) best = &e;
  ASSERT_NE(best, nullptr);
  std::string note;
  auto b = make_backend("auto", extensions_model(), &note);
  if (!note.empty()) GTEST_SKIP() << "the preferred backend could not be set up here: " << note;
  EXPECT_EQ(b->name(), best->name);
  for (const BackendEntry& e : backend_registry())  // never an emulated device
    if (backend_is_emulated(e.name)) EXPECT_NE(b->name(), e.name);
}

TEST(BackendRegistry, UnknownNameListsTheRegisteredOnes) {
  try {
    make_backend("tpu", extensions_model());
    FAIL() << "expected Error";
  } catch (const BackendFailure& e) {
    FAIL() << "an unknown name is bad input, not a device failure: " << e.what();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_TRUE(contains(m, "'tpu'")) << m;
    EXPECT_TRUE(contains(m, "auto")) << m;
    for (const BackendEntry& r : backend_registry()) EXPECT_TRUE(contains(m, r.name)) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

// A model of four layers without weights, enough for plan_run: attention at 1 and 3, layer 3 with
// trained sinks, `trained` register rows of width H = 8.
Model plan_model(Normalizer config_norm, int trained) {
  Model m;
  m.config.hidden_size = 8;
  m.config.num_hidden_layers = 4;
  m.config.attention_normalizer = config_norm;
  m.config.max_position_embeddings = 4096;
  m.config.attn_layer_period = 2;  // attention at 1 and 3
  m.config.attn_layer_offset = 1;
  m.config.num_experts = 1;
  m.schedule = LayerSchedule::from_config(m.config);
  m.w.layers.resize(4);
  m.w.layers[3].attn.sinks.assign(2, 0.5f);
  m.w.register_rows.assign(static_cast<size_t>(trained * 8), 0.0f);
  return m;
}

TEST(RunPlan, RegistersDefaultToTheTrainedRowsAndAreBounded) {
  const Model m = plan_model(Normalizer::Softmax, 3);
  RunOptions o;
  EXPECT_EQ(plan_run(m, o).trained_registers, 3);
  EXPECT_EQ(plan_run(m, o).registers, 3);  // -1: as trained
  o.registers = 0;
  EXPECT_EQ(plan_run(m, o).registers, 0);
  o.registers = 7;  // more than trained: the rest are test-time registers
  EXPECT_EQ(plan_run(m, o).registers, 7);
  o.registers = kMaxRunRegisters;
  EXPECT_EQ(plan_run(m, o).registers, 1024);
  o.registers = kMaxRunRegisters + 1;
  try {
    plan_run(m, o);
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "registers: 1025 is out of range [0, 1024]");
  }
}

TEST(RunPlan, NormalizerPerLayerAsTrainedOrOverridden) {
  const Model m = plan_model(Normalizer::Softmax1, 0);
  RunOptions o;  // as trained: config's normalizer, Sink where the layer has sinks
  RunPlan p = plan_run(m, o);
  EXPECT_EQ(p.normalizer, (std::vector<Normalizer>{Normalizer::Softmax, Normalizer::Softmax1, Normalizer::Softmax,
                                                   Normalizer::Sink}));
  EXPECT_EQ(p.sinks, (std::vector<char>{0, 0, 0, 1}));
  o.normalizer_override = true;
  o.normalizer = Normalizer::Softmax;  // every attention layer, sinks unused
  p = plan_run(m, o);
  EXPECT_EQ(p.normalizer[1], Normalizer::Softmax);
  EXPECT_EQ(p.normalizer[3], Normalizer::Softmax);
  EXPECT_EQ(p.sinks, (std::vector<char>{0, 0, 0, 0}));
  o.normalizer = Normalizer::Sink;  // a layer without trained sinks gets null logits 0
  p = plan_run(m, o);
  EXPECT_EQ(p.normalizer[1], Normalizer::Sink);
  EXPECT_EQ(p.normalizer[3], Normalizer::Sink);
  EXPECT_EQ(p.sinks, (std::vector<char>{0, 0, 0, 1}));
}

TEST(RunPlan, ContextLimitIsTheSettingElseTheConfig) {
  const Model m = plan_model(Normalizer::Softmax, 0);
  RunOptions o;
  EXPECT_EQ(plan_run(m, o).context_limit, 4096);
  o.max_context = 7;
  EXPECT_EQ(plan_run(m, o).context_limit, 7);
}

TEST(RunPlan, EveryAvailableBackendStartsAsPlanned) {
  auto model = extensions_model();
  for (const std::string& name : available_backends()) {
    auto b = make_backend(name, model);
    RunOptions o;
    b->start(o);
    EXPECT_EQ(b->registers(), plan_run(*model, o).registers) << name;
    EXPECT_EQ(b->registers(), 2) << name;  // the checkpoint's trained rows
    o.registers = 5;
    b->start(o);
    EXPECT_EQ(b->registers(), 5) << name;
    o.registers = 1025;
    try {
      b->start(o);
      ADD_FAILURE() << name << ": 1025 registers accepted";
    } catch (const BackendFailure& e) {
      ADD_FAILURE() << name << ": " << e.what();
    } catch (const Error& e) {
      EXPECT_STREQ(e.what(), "registers: 1025 is out of range [0, 1024]") << name;
    }
  }
}

}  // namespace
}  // namespace hl
