// The shipped demo checkpoints (resources/models, issue 4) against the trainer's own model: the
// expected logits in tests/golden/demo were computed by tools/train (PyTorch, float64, written
// independently of this engine) for every variant, every normalizer override, trained and
// test-time registers, the full fine-tune and the LoRA / DoRA adapters merged into the base.
// The engine must reproduce every run within runs.json's tolerance (1e-3 relative to the run's
// largest logit), by one-token decode steps and by one prefill of the whole prompt.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/backend/backend.h"
#include "engine/io/adapter.h"
#include "engine/io/safetensors.h"
#include "engine/model/loader.h"
#include "tests/engine/golden_util.h"

namespace fs = std::filesystem;
using namespace hl;

namespace {

struct DemoRun {
  std::string name, checkpoint, adapter, file, tensor;
  std::vector<int32_t> ids;
  RunOptions opts;
  double tolerance = 1e-3;
};

void PrintTo(const DemoRun& r, std::ostream* os) { *os << r.name; }

const fs::path kDemoGolden = fs::path(HL_GOLDEN_DIR) / "demo";

std::vector<DemoRun> demo_runs() {
  std::vector<DemoRun> runs;
  std::ifstream in(kDemoGolden / "runs.json");
  if (!in) return runs;
  const nlohmann::json j = nlohmann::json::parse(in);
  const double tol = j.value("tolerance_relative", 1e-3);
  for (const auto& r : j.at("runs")) {
    DemoRun d;
    d.name = r.at("name").get<std::string>();
    d.checkpoint = (fs::path(HL_SOURCE_DIR) / r.at("checkpoint").get<std::string>()).string();
    if (!r.at("adapter").is_null()) d.adapter = (fs::path(HL_SOURCE_DIR) / r.at("adapter").get<std::string>()).string();
    d.file = r.at("file").get<std::string>();
    d.tensor = r.at("tensor").get<std::string>();
    d.ids = golden_test::token_ids(r);
    golden_test::apply_toggles(r, &d.opts, d.name);
    d.tolerance = tol;
    runs.push_back(d);
  }
  return runs;
}

std::shared_ptr<Model> load_run_model(const DemoRun& r) {
  auto model = load_model(r.checkpoint);
  if (!r.adapter.empty()) merge_adapter(*model, load_adapter(r.adapter, *model));
  return model;
}

std::vector<TokenTrace> run_cpu(const std::shared_ptr<Model>& model, const DemoRun& r, bool prefill) {
  auto backend = make_backend("cpu", model);
  return golden_test::run_tokens(*backend, r.ids, r.opts, prefill);
}

}  // namespace

class DemoModels : public ::testing::TestWithParam<DemoRun> {};

TEST_P(DemoModels, EngineReproducesTheTrainersLogits) {
  const DemoRun& r = GetParam();
  auto model = load_run_model(r);
  SafetensorsFile want_file = SafetensorsFile::open((kDemoGolden / r.file).string());
  const TensorInfo* want = want_file.find(r.tensor);
  ASSERT_NE(want, nullptr) << r.file << " lacks " << r.tensor;
  ASSERT_EQ(want->dtype, DType::F32);
  ASSERT_EQ(want->shape.size(), 2u);
  ASSERT_EQ(want->shape[0], static_cast<int64_t>(r.ids.size()));
  const int64_t V = want->shape[1];
  ASSERT_EQ(V, model->config.vocab_size);
  const float* expected = reinterpret_cast<const float*>(want->data);
  double scale = 0;
  for (int64_t i = 0; i < want->numel(); ++i) scale = std::max(scale, std::fabs(static_cast<double>(expected[i])));
  ASSERT_GT(scale, 0.0);
  for (bool prefill : {false, true}) {
    const std::vector<TokenTrace> recs = run_cpu(model, r, prefill);
    ASSERT_EQ(recs.size(), r.ids.size());
    double worst = 0;
    for (size_t t = 0; t < recs.size(); ++t) {
      ASSERT_EQ(static_cast<int64_t>(recs[t].logits.size()), V);
      for (int64_t v = 0; v < V; ++v)
        worst = std::max(worst, std::fabs(recs[t].logits[v] - static_cast<double>(expected[t * V + v])));
    }
    EXPECT_LE(worst / scale, r.tolerance) << r.name << (prefill ? " (prefill)" : " (decode)") << ": max |Δlogit| "
                                          << worst << " of scale " << scale;
  }
}

INSTANTIATE_TEST_SUITE_P(Shipped, DemoModels, ::testing::ValuesIn(demo_runs()),
                         [](const ::testing::TestParamInfo<DemoRun>& info) {
                           std::string n = info.param.name;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(DemoModels);

TEST(DemoModelsData, EveryVariantNormalizerRegistersAndAdapterIsCovered) {
  // The list ships with the repository; an empty or partial list would make the test above vacuous.
  const std::vector<DemoRun> runs = demo_runs();
  ASSERT_GE(runs.size(), 18u);
  bool softmax1 = false, sink = false, softmax = false, regs = false, lora = false, dora = false;
  for (const DemoRun& r : runs) {
    if (r.opts.normalizer_override) {
      softmax1 |= r.opts.normalizer == Normalizer::Softmax1;
      sink |= r.opts.normalizer == Normalizer::Sink;
      softmax |= r.opts.normalizer == Normalizer::Softmax;
    }
    regs |= r.opts.registers > 0;
    lora |= r.adapter.find("lora") != std::string::npos;
    dora |= r.adapter.find("dora") != std::string::npos;
  }
  EXPECT_TRUE(softmax1 && sink && softmax && regs && lora && dora);
  for (const char* v : {"baseline", "softmax1", "registers", "no-attention"})
    EXPECT_TRUE(fs::exists(fs::path(HL_SOURCE_DIR) / "resources/models" / v / "config.json")) << v;
}
