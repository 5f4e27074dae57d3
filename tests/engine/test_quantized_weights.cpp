// Weights in ggml's block formats held in memory (core/dtype.h block types): the CPU kernels that read
// them against the exact dequantised values on every ISA, quantise on load (model/quantize.h: the rule,
// the error per matrix, the memory it saves, logits against the as-stored run), and GGUF matrices kept
// in their stored blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_simd.h"
#include "engine/core/error.h"
#include "engine/io/checkpoint.h"
#include "engine/model/generator.h"
#include "engine/model/loader.h"
#include "engine/model/quantize.h"
#include "test_util.h"
#include "tests/engine/block_model_util.h"

namespace hl {
namespace {

constexpr DType kQuantizable[] = {DType::Q8_0, DType::Q4_0, DType::Q5_0, DType::Q5_1,
                                  DType::Q4_K, DType::Q5_K, DType::Q6_K};

std::string lower_case(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Writes bytes at `at` past the data section of safetensors file `path` (8-byte header length first).
void patch_file(const std::string& path, uint64_t at, const std::vector<uint8_t>& bytes) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t header = 0;
  f.read(reinterpret_cast<char*>(&header), 8);
  f.seekp(static_cast<std::streamoff>(8 + header + at));
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST(BlockWeights, DTypeFactsMatchGgml) {
  EXPECT_EQ(dtype_block(DType::Q8_0), 32);
  EXPECT_EQ(dtype_block_bytes(DType::Q8_0), 34);
  EXPECT_EQ(dtype_block(DType::Q4_K), 256);
  EXPECT_EQ(dtype_block_bytes(DType::Q4_K), 144);
  EXPECT_EQ(dtype_block_bytes(DType::Q6_K), 210);
  EXPECT_EQ(dtype_row_bytes(DType::Q4_K, 512), 288);
  EXPECT_EQ(dtype_row_bytes(DType::BF16, 512), 1024);
  EXPECT_STREQ(dtype_name(DType::IQ4_XS), "IQ4_XS");
  EXPECT_EQ(dtype_ggml_type(DType::Q4_K), 12u);
  EXPECT_EQ(dtype_from_ggml(14), DType::Q6_K);
  EXPECT_EQ(dtype_from_ggml(9), std::nullopt);  // Q8_1: not read
  EXPECT_FALSE(dtype_from_name("Q8_0"));         // a safetensors file never names a block type
  EXPECT_EQ(dtype_from_weight_name("q4_k"), DType::Q4_K);
}

// Every ISA's matrix–vector product on block rows equals the dot of the exactly dequantised rows with
// x, to fp32 summation rounding; widen() is ggml's dequantisation bit for bit.
TEST(BlockWeights, MatvecOnEveryIsaEqualsTheDequantisedProduct) {
  const int64_t rows = 7, cols = 768;  // 3 super-blocks, 24 blocks of 32
  const std::vector<float> w = randn(static_cast<size_t>(rows * cols), 11, 0.05f);
  const std::vector<float> x = randn(static_cast<size_t>(cols), 12);
  for (DType t : kQuantizable) {
    SCOPED_TRACE(dtype_name(t));
    std::vector<uint8_t> q(static_cast<size_t>(rows * dtype_row_bytes(t, cols)));
    from_float(t, w.data(), q.data(), w.size());
    std::vector<float> deq(w.size());
    to_float(t, q.data(), deq.data(), deq.size());
    double worst_err = 0;
    for (float v : deq) worst_err = std::max(worst_err, std::abs(double(v)));
    ASSERT_GT(worst_err, 0.0);
    for (auto isa : {cpu::simd::Isa::Portable, cpu::simd::Isa::Avx2, cpu::simd::Isa::Avx512}) {
      const cpu::simd::Kernels* k = cpu::simd::kernels_for(isa);
      if (!k) continue;
      SCOPED_TRACE(k->name);
      std::vector<float> y(static_cast<size_t>(rows));
      k->matvec(t, q.data(), rows, cols, x.data(), y.data());
      for (int64_t r = 0; r < rows; ++r) {
        double exact = 0, mag = 0;
        for (int64_t c = 0; c < cols; ++c) {
          exact += double(deq[static_cast<size_t>(r * cols + c)]) * x[static_cast<size_t>(c)];
          mag += std::abs(double(deq[static_cast<size_t>(r * cols + c)]) * x[static_cast<size_t>(c)]);
        }
        EXPECT_NEAR(y[static_cast<size_t>(r)], exact, 1e-6 * mag + 1e-30) << "row " << r;
      }
      std::vector<float> wide(deq.size());
      k->widen(t, q.data(), wide.data(), static_cast<int64_t>(wide.size()));
      EXPECT_EQ(0, std::memcmp(wide.data(), deq.data(), wide.size() * sizeof(float)));
    }
  }
}

// A 256-wide generated model (every layer kind of the tiny config) through --weights: the rule, the
// measured error, the bytes, and logits near the as-stored run's.
struct Generated : test::BlockModel {
  Generated() : BlockModel(3) {}
};

std::vector<float> last_logits(const std::shared_ptr<const Model>& m, const std::vector<int32_t>& ids) {
  std::unique_ptr<Backend> b = make_backend("cpu", m);
  b->start(RunOptions{});
  std::vector<TokenTrace> out;
  for (int32_t id : ids) b->forward(&id, 1, &out);
  return out.back().logits;
}

// A copy of `m` whose block matrices are F32 copies of their dequantised values.
std::shared_ptr<const Model> widened_copy(const Model& m) {
  auto c = std::make_shared<Model>(m);
  const bool tied = c->w.lm_head.data == c->w.embed.data;
  for (Mat* x : c->matrices()) {
    if (!dtype_is_block(x->dtype)) continue;
    auto buf = std::make_shared<std::vector<float>>(static_cast<size_t>(x->rows * x->cols));
    std::vector<uint8_t> plain;  // a matrix in 16-row groups (Mat::rows16): the rows in ggml's layout
    to_float(x->dtype, plain_rows(*x, 0, x->rows, plain), buf->data(), buf->size());
    x->dtype = DType::F32;
    x->rows16 = false;
    x->data = buf->data();
    c->keep_alive.push_back(buf);
  }
  if (tied) c->w.lm_head = c->w.embed;
  return c;
}

// The logits' relative RMS change when decode rounds x to 8 bits per block instead of keeping it in
// fp32, on the generated 256-wide model: measured 1.5 % (Q8_0), 2.3 % (Q6_K, Q4_K), and 2.7 % for
// int8 decode against the fp32 prefill (RecordProperty below). That is about Q8_0's own weight error
// (2.1 %) and far below Q6_K's and Q4_K's (5.7 %, 18 %). 5 % leaves room; a wrong scale or code
// moves the logits by their own size.
constexpr double kX8LogitsBound = 0.05;

double rel_rms(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) e += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), n += double(a[i]) * a[i];
  return std::sqrt(e / n);
}

TEST(QuantizeOnLoad, RuleErrorsBytesAndLogits) {
  Generated g;
  const std::vector<int32_t> ids = {1, 5, 9, 33, 2, 70, 4, 4};
  std::shared_ptr<const Model> stored = load_model(g.dir.path);
  const std::vector<float> ref = last_logits(stored, ids);
  // Bounds on each matrix's relative RMS error for Gaussian-like weights (ggml's quantisers: Q8_0
  // ~0.4 %, Q6_K ~1 %, Q4_K ~4–5 %).
  const std::vector<std::pair<DType, double>> formats = {{DType::Q8_0, 0.01}, {DType::Q6_K, 0.03}, {DType::Q4_K, 0.10}};
  double last = 0;
  for (const auto& [fmt, bound] : formats) {
    SCOPED_TRACE(dtype_name(fmt));
    LoadOptions o;
    o.weights = fmt;
    std::shared_ptr<const Model> q = load_model(g.dir.path, o);
    ASSERT_TRUE(q->quantization);
    const WeightQuantization& wq = *q->quantization;
    EXPECT_EQ(wq.format, fmt);
    int64_t quantised = 0;
    for (const MatQuant& m : wq.mats) {
      const bool kept_by_rule = m.name.find("embed_tokens") != std::string::npos || m.name == "lm_head.weight" ||
                                m.name.find("router") != std::string::npos || m.name.find("x_proj") != std::string::npos ||
                                m.name.find("dt_proj") != std::string::npos;
      EXPECT_EQ(m.kept.empty(), !kept_by_rule) << m.name << ": " << m.kept;
      if (m.kept.empty()) {
        ++quantised;
        EXPECT_GT(m.rel_rms, 0.0) << m.name;
        EXPECT_LT(m.rel_rms, bound) << m.name;
        EXPECT_EQ(m.bytes_after, m.rows * dtype_row_bytes(fmt, m.cols));
      } else {
        EXPECT_EQ(m.rel_rms, 0.0);
        EXPECT_EQ(m.bytes_after, m.bytes_before);
      }
    }
    EXPECT_GT(quantised, 10);
    EXPECT_LT(wq.bytes_after, wq.bytes_before);
    EXPECT_EQ(weights_label(*q), lower_case(dtype_name(fmt)));
    // The matrices really are held in the format, and the run reads them.
    EXPECT_EQ(q->w.layers[0].mlp.down.dtype == fmt || q->w.layers[0].moe.experts.size() > 0, true);
    // With x in fp32 the block kernels compute what F32 copies of the dequantised matrices compute, to
    // fp32 rounding.
    LoadOptions o32 = o;
    o32.fp32_activations = true;
    std::shared_ptr<const Model> q32 = load_model(g.dir.path, o32);
    EXPECT_EQ(weights_label(*q32), lower_case(dtype_name(fmt)) + "+fp32-activations");
    EXPECT_TRUE(q32->w.lm_head.fp32_activations);
    const std::vector<float> got32 = last_logits(q32, ids);
    const std::vector<float> same = last_logits(widened_copy(*q), ids);
    EXPECT_LT(rel_rms(same, got32), 2e-6) << "block kernels vs the dequantised weights in F32";
    // By default decode rounds x to 8 bits per block (llama.cpp's path): the logits move, by far less
    // than the format moved them (kX8LogitsBound).
    const std::vector<float> got = last_logits(q, ids);
    const double x8 = rel_rms(got32, got);
    EXPECT_GT(x8, 0.0);
    EXPECT_LT(x8, kX8LogitsBound);
    RecordProperty(std::string("logits_rel_rms_int8_vs_fp32_x_") + dtype_name(fmt), std::to_string(x8));
    // Against the stored weights the logits move by what quantisation changed: more for coarser formats.
    const double r = rel_rms(ref, got);
    EXPECT_GT(r, last);
    EXPECT_LT(r, 0.5);
    last = r;
    RecordProperty(std::string("logits_rel_rms_") + dtype_name(fmt), std::to_string(r));
  }
}

// Prefill (BLAS products on panels dequantised from the blocks) agrees with decode (the block kernels).
TEST(QuantizeOnLoad, PrefillOnBlocksAgreesWithDecode) {
  Generated g;
  const std::vector<int32_t> ids = {1, 5, 9, 33, 2, 70, 4, 4, 17, 3};
  for (DType fmt : {DType::Q8_0, DType::Q4_K}) {
    SCOPED_TRACE(dtype_name(fmt));
    for (bool fp32x : {true, false}) {
      LoadOptions o;
      o.weights = fmt;
      o.fp32_activations = fp32x;
      std::shared_ptr<const Model> q = load_model(g.dir.path, o);
      std::unique_ptr<Backend> b = make_backend("cpu", q);
      b->start(RunOptions{});
      std::vector<TokenTrace> pre;
      b->forward(ids.data(), static_cast<int64_t>(ids.size()), &pre);
      ASSERT_EQ(pre.size(), ids.size());
      const std::vector<float> dec = last_logits(q, ids);
      // Prefill keeps x in fp32: equal to fp32 decode to rounding, to int8 decode within its error.
      EXPECT_LT(rel_rms(dec, pre.back().logits), fp32x ? 1e-5 : kX8LogitsBound) << (fp32x ? "fp32 x" : "int8 x");
    }
  }
}

TEST(QuantizeOnLoad, BudgetCountsTheQuantisedSizes) {
  Generated g;
  const Checkpoint ck = Checkpoint::open(g.dir.path);
  const uint64_t stored = ck.total_tensor_bytes();
  LoadOptions o;
  o.memory_budget_bytes = stored * 3 / 4;  // too small as stored, enough as Q4_K
  EXPECT_THROW(load_model(g.dir.path, o), LoadError);
  o.weights = DType::Q4_K;
  EXPECT_NO_THROW(load_model(g.dir.path, o));
  o.memory_budget_bytes = stored / 20;
  try {
    load_model(g.dir.path, o);
    FAIL() << "expected a LoadError";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("of matrices as Q4_K"), std::string::npos) << e.what();
  }
}

TEST(QuantizeOnLoad, NonFiniteWeightIsRefusedWithItsElement) {
  Generated g;
  // Patch one element of a quantised matrix to NaN (BF16 0x7fc0) in the file.
  const Checkpoint ck = Checkpoint::open(g.dir.path);
  const TensorInfo* t = ck.find("model.layers.0.feed_forward.down_proj.weight");
  if (!t) t = ck.find("model.layers.1.feed_forward.down_proj.weight");
  ASSERT_NE(t, nullptr);
  const std::string file = t->file;
  const uint64_t at = t->begin + 2 * (3 * t->shape[1] + 7);  // element [3, 7]
  const std::string name = t->name;
  patch_file(file, at, {0xc0, 0x7f});
  LoadOptions o;
  o.weights = DType::Q8_0;
  try {
    load_model(g.dir.path, o);
    FAIL() << "expected a LoadError";
  } catch (const LoadError& e) {
    EXPECT_EQ(std::string(e.what()), name + ": element [3, 7] is not finite (allowed finite weights for --weights q8_0)");
  }
}

// A 52B Jamba-shaped checkpoint (the jamba-v0.1 preset: 4,096 wide, 16 experts of 14,336) written
// as a shape-only file (a header and a sparse data section, nothing drawn, nothing run): the memory
// each format needs, and the load check refusing before any matrix is quantised.
TEST(QuantizeOnLoad, A52BJambaShapedCheckpointReportsItsMemoryInEachFormat) {
  test::TempDir dir;
  GenerateOptions o;
  o.config = preset_config("jamba-v0.1");
  generate_shape_only(dir.path, o);
  const Checkpoint ck = Checkpoint::open(dir.path);
  LoadOptions unbounded;
  unbounded.memory_budget_bytes = UINT64_MAX;
  std::shared_ptr<Model> m = bind_model(ck, unbounded);
  EXPECT_GT(m->param_count(), int64_t{51'000'000'000});
  EXPECT_NEAR(static_cast<double>(ck.total_tensor_bytes()), 2.0 * static_cast<double>(m->param_count()), 1e6);
  int64_t previous = INT64_MAX;
  for (DType fmt : {DType::Q8_0, DType::Q6_K, DType::Q4_K}) {
    SCOPED_TRACE(dtype_name(fmt));
    const WeightQuantization q = plan_quantization(*m, fmt);
    int64_t quantised_params = 0;
    for (const MatQuant& mq : q.mats) {
      if (!mq.kept.empty()) continue;
      quantised_params += mq.rows * mq.cols;
      // Exactly the block format's bytes per value: BF16's 2 bytes become block_bytes / block.
      EXPECT_EQ(mq.bytes_after * dtype_block(fmt) * 2, mq.bytes_before * dtype_block_bytes(fmt)) << mq.name;
    }
    EXPECT_GT(quantised_params, int64_t{50'000'000'000});  // everything but embedding, head, routers, x/dt_proj
    EXPECT_LT(q.bytes_after, previous);
    previous = q.bytes_after;
    RecordProperty(std::string("jamba52b_matrix_gib_") + dtype_name(fmt), std::to_string(q.bytes_after / 1073741824.0));
  }
  // As stored the 52B model needs ~96 GiB; Q4_K ~28 GiB: a 16 GiB budget refuses both, naming the format.
  LoadOptions o16;
  o16.memory_budget_bytes = uint64_t{16} << 30;
  o16.weights = DType::Q4_K;
  const std::string msg = test::load_error_of([&] { load_model(dir.path, o16); });
  EXPECT_NE(msg.find("of matrices as Q4_K"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(--memory-budget)"), std::string::npos) << msg;
}

// `+head`: the LM head (and the embedding when tied to it) is quantised too; the label says so, fewer
// bytes, logits still near the stored run's.
TEST(QuantizeOnLoad, HeadOption_QuantisesTheLmHeadToo) {
  bool head = false;
  EXPECT_EQ(parse_weight_format("q8_0+head", "--weights", &head), DType::Q8_0);
  EXPECT_TRUE(head);
  EXPECT_EQ(parse_weight_format("Q4_K+HEAD", "--weights", &head), DType::Q4_K);
  EXPECT_TRUE(head);
  EXPECT_EQ(parse_weight_format("q4_k", "--weights", &head), DType::Q4_K);
  EXPECT_FALSE(head);
  EXPECT_THROW(parse_weight_format("+head", "--weights", &head), Error);
  EXPECT_THROW(parse_weight_format("as-stored+head", "--weights", &head), Error);
  Generated g;
  const std::vector<int32_t> ids = {1, 5, 9, 33, 2, 70};
  const std::vector<float> ref = last_logits(load_model(g.dir.path), ids);
  LoadOptions o;
  o.weights = DType::Q8_0;
  const std::shared_ptr<const Model> body = load_model(g.dir.path, o);
  o.quantize_head = true;
  const std::shared_ptr<const Model> all = load_model(g.dir.path, o);
  ASSERT_TRUE(all->quantization);
  EXPECT_TRUE(all->quantization->head);
  EXPECT_EQ(weights_label(*all), "q8_0+head");
  EXPECT_EQ(weights_label(*body), "q8_0");
  EXPECT_EQ(all->w.lm_head.dtype, DType::Q8_0);
  EXPECT_NE(body->w.lm_head.dtype, DType::Q8_0);
  const bool tied = all->w.lm_head.data == all->w.embed.data;
  EXPECT_EQ(all->w.embed.dtype == DType::Q8_0, tied) << "the embedding follows the head only when tied";
  EXPECT_EQ(all->quantization->quantized_count(), body->quantization->quantized_count() + 1);
  EXPECT_LT(all->quantization->bytes_after, body->quantization->bytes_after);
  const double r = rel_rms(ref, last_logits(all, ids));
  EXPECT_GT(r, 0.0);
  EXPECT_LT(r, 0.05);
}

TEST(QuantizeOnLoad, FormatNames) {
  EXPECT_EQ(parse_weight_format("as-stored"), std::nullopt);
  EXPECT_EQ(parse_weight_format("Q6_K"), DType::Q6_K);
  EXPECT_THROW(parse_weight_format("q3_k"), Error);  // dequantise-only: no reference quantiser
  try {
    parse_weight_format("int4");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "--weights: 'int4' is not a weight format (allowed as-stored, q8_0, q4_k, q6_k, q4_0, q5_0, q5_1, q5_k, "
              "each optionally with +head)");
  }
}

}  // namespace
}  // namespace hl
