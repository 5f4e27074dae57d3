// Q4_K and Q8_0 matrices in groups of 16 rows (core/rows16.h, Mat::rows16): the layout gives back every
// byte of every row, the product that reads it (AVX-512 VNNI) equals the portable int8 product of the
// plain rows within fp32 rounding, and every CPU reader of a rows16 matrix (decode products over any
// split of the rows, x in fp32, the prefill's panels, one row widened) gives what it gives for the
// same rows in ggml's layout.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "engine/backend/backend.h"

#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/cpu/cpu_simd.h"
#include "engine/core/dtype.h"
#include "engine/core/rows16.h"
#include "engine/model/loader.h"
#include "engine/model/mat.h"
#include "engine/model/quantize.h"
#include "tests/engine/block_model_util.h"
#include "tests/engine/int8_test_util.h"

namespace hl {
namespace {

using test::block_rows;
using test::decode_activations;

// The formats with a 16-row layout, each test run for each.
class Rows16 : public ::testing::TestWithParam<DType> {};
INSTANTIATE_TEST_SUITE_P(Formats, Rows16, ::testing::Values(DType::Q4_K, DType::Q8_0),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

std::vector<uint8_t> packed(DType t, const std::vector<uint8_t>& plain, int64_t rows, int64_t cols) {
  std::vector<uint8_t> out(plain.size());
  rows16_pack_rows(t, plain.data(), rows, cols, out.data());
  return out;
}

Mat mat_of(DType t, const std::vector<uint8_t>& bytes, int64_t rows, int64_t cols, bool rows16) {
  Mat m;
  m.dtype = t, m.data = bytes.data(), m.rows = rows, m.cols = cols, m.name = "m", m.rows16 = rows16;
  return m;
}

TEST_P(Rows16, EveryRowsBytesComeBack) {
  const DType t = GetParam();
  const int64_t rows = 32, cols = 768, rb = dtype_row_bytes(t, cols);
  for (bool random : {false, true}) {
    const std::vector<uint8_t> plain = block_rows(t, rows, cols, 3, random);
    const std::vector<uint8_t> p = packed(t, plain, rows, cols);
    EXPECT_NE(p, plain);
    const Mat m = mat_of(t, p, rows, cols, true);
    std::vector<uint8_t> scratch;
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* row = plain_rows(m, r, 1, scratch);
      EXPECT_TRUE(std::equal(row, row + rb, plain.begin() + r * rb)) << "row " << r;
    }
    const uint8_t* all = plain_rows(m, 5, 20, scratch);  // rows 5..24: across the two groups
    EXPECT_TRUE(std::equal(all, all + 20 * rb, plain.begin() + 5 * rb));
    const Mat flat = mat_of(t, plain, rows, cols, false);
    EXPECT_EQ(plain_rows(flat, 7, 2, scratch), flat.row_ptr(7));  // ggml's layout: the rows themselves
  }
}

// The kernel that reads the groups against the portable int8 product of the plain rows: the same
// integer sums per block, added in another order in fp32, so within 1e-5 of Σ|ŵ·x̂| (as the ISAs
// against each other in test_int8_matvec.cpp); a wrong scale, min or code is off by far more.
TEST_P(Rows16, GroupKernel_MatchesPortableInt8) {
  const DType t = GetParam();
  const cpu::simd::Kernels& k = cpu::simd::kernels();
  if (!k.matvec_rows16) GTEST_SKIP() << "no kernel reads 16-row groups on this CPU (" << k.name << ")";
  for (int64_t cols : {256, 512, 2048}) {
    const int64_t rows = 48;
    SCOPED_TRACE(cols);
    const std::vector<uint8_t> plain = block_rows(t, rows, cols, 5, true);
    const std::vector<uint8_t> p = packed(t, plain, rows, cols);
    const std::vector<float> x = decode_activations(cols, 9);
    std::vector<float> want(static_cast<size_t>(rows)), got(want.size()), w(static_cast<size_t>(cols));
    cpu::simd::portable().matvec_x8(t, plain.data(), rows, cols, x.data(), want.data());
    k.matvec_rows16(t, p.data(), rows / 16, cols, x.data(), got.data());
    for (int64_t r = 0; r < rows; ++r) {
      to_float(t, plain.data() + r * dtype_row_bytes(t, cols), w.data(), w.size());
      double mag = 0;
      for (int64_t c = 0; c < cols; ++c) mag += std::fabs(static_cast<double>(w[c]) * x[c]);
      EXPECT_NEAR(got[r], want[r], 1e-5 * mag) << "row " << r;
    }
  }
}

// Through the CPU backend's products: any split of the rows gives the same bits as one call (a part
// of a group is computed as its whole group); x in fp32, the prefill's panels and one widened row
// equal the plain matrix's bit for bit (the rows are taken out of their groups for those).
TEST_P(Rows16, CpuReaders_MatchThePlainLayout) {
  const DType t = GetParam();
  const int64_t rows = 80, cols = 512;
  const std::vector<uint8_t> plain = block_rows(t, rows, cols, 7, false);
  const std::vector<uint8_t> p = packed(t, plain, rows, cols);
  const std::vector<float> x = decode_activations(cols, 11);
  Mat a = mat_of(t, plain, rows, cols, false), b = mat_of(t, p, rows, cols, true);
  std::vector<float> whole(static_cast<size_t>(rows)), pieces(whole.size(), -7.0f), flat(whole.size());
  cpu::matvec_rows(b, 0, rows, x.data(), whole.data());
  int64_t r = 0;
  for (int64_t n : {1, 3, 16, 5, 13, 32}) {
    cpu::matvec_rows(b, r, n, x.data(), pieces.data() + r);
    r += n;
  }
  cpu::matvec_rows(b, r, rows - r, x.data(), pieces.data() + r);
  EXPECT_EQ(pieces, whole);
  cpu::matvec_rows(a, 0, rows, x.data(), flat.data());
  for (int64_t i = 0; i < rows; ++i) EXPECT_NEAR(whole[i], flat[i], 1e-4 * (std::fabs(flat[i]) + 1)) << "row " << i;

  a.fp32_activations = b.fp32_activations = true;
  std::vector<float> ya(whole.size()), yb(whole.size());
  cpu::linear(a, x.data(), 1, ya.data());
  cpu::linear(b, x.data(), 1, yb.data());
  EXPECT_EQ(ya, yb);

  const int64_t S = 6;  // a prefill: panels widened from the rows
  std::vector<float> X(static_cast<size_t>(S * cols)), Ya(static_cast<size_t>(S * rows)), Yb(Ya.size());
  for (int64_t s = 0; s < S; ++s) {
    const std::vector<float> xs = decode_activations(cols, 20 + static_cast<uint32_t>(s));
    std::copy(xs.begin(), xs.end(), X.begin() + s * cols);
  }
  cpu::linear(a, X.data(), S, Ya.data());
  cpu::linear(b, X.data(), S, Yb.data());
  EXPECT_EQ(Ya, Yb);

  std::vector<float> ra(static_cast<size_t>(cols)), rb(ra.size());
  for (int64_t i : {0, 15, 17, 79}) {
    cpu::widen_row(a, i, ra.data());
    cpu::widen_row(b, i, rb.data());
    EXPECT_EQ(ra, rb) << "row " << i;
  }
}

std::vector<float> last_logits(const std::shared_ptr<const Model>& m) {
  std::unique_ptr<Backend> b = make_backend("cpu", m);
  b->start(RunOptions{});
  std::vector<TokenTrace> out;
  for (int32_t id : {1, 7, 3, 9, 4}) b->forward(&id, 1, &out);
  return out.back().logits;
}

// Quantise on load lays the format out in groups where the CPU reads them; a model holding it in
// ggml's layout in its own memory (as a GGUF file's weights arrive) is rearranged in place by
// interleave_rows16 into the same bytes, the head tied to the embedding once, and then runs bit for
// bit as the quantised model does.
TEST_P(Rows16, ModelsOwnMatrices_RearrangedInPlaceOnce) {
  test::BlockModel g(3);
  LoadOptions o;
  o.weights = GetParam();
  o.quantize_head = true;
  std::shared_ptr<const Model> q = load_model(g.dir.path, o);
  auto plain = std::make_shared<Model>(*q);
  std::map<const void*, std::shared_ptr<std::vector<uint8_t>>> copies;  // by the grouped bytes
  int64_t grouped = 0;
  for (Mat* x : plain->matrices()) {
    if (!x->rows16) continue;
    ++grouped;
    auto& c = copies[x->data];
    if (!c) {
      c = std::make_shared<std::vector<uint8_t>>();
      const uint8_t* rows = plain_rows(*x, 0, x->rows, *c);
      EXPECT_EQ(rows, c->data());
      plain->keep_alive.push_back(c);
    }
    x->data = c->data();
    x->rows16 = false;
  }
  EXPECT_EQ(grouped > 0, rows16_preferred(GetParam()));
  if (q->w.lm_head.data == q->w.embed.data) plain->w.lm_head = plain->w.embed;
  const std::vector<float> before = last_logits(plain);
  interleave_rows16(*plain);
  const std::vector<Mat*> a = const_cast<Model&>(*q).matrices(), b = plain->matrices();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(a[i]->name);
    EXPECT_EQ(a[i]->rows16, b[i]->rows16);
    EXPECT_EQ(std::memcmp(a[i]->data, b[i]->data, static_cast<size_t>(a[i]->bytes())), 0);
  }
  EXPECT_EQ(plain->w.lm_head.rows16, q->w.lm_head.rows16);
  EXPECT_EQ(last_logits(plain), last_logits(q));
  if (grouped == 0) EXPECT_EQ(last_logits(plain), before);
}

}  // namespace
}  // namespace hl
