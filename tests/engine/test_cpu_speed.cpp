// The fast paths of the CPU backend against their references: every vector kernel (AVX-512, AVX2,
// whichever this CPU has) against the portable loops and against float64 sums within the fp32
// rounding bound; the thread pool's coverage; decode allocating nothing but its TokenTrace vectors;
// BLAS prefill against step-by-step decode on a generated demo-sized model (wider than the goldens).
#include <gtest/gtest.h>

#include <cstring>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <new>
#include <random>
#include <stdexcept>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/cpu/cpu_simd.h"
#include "engine/core/thread_pool.h"
#include "engine/model/generator.h"
#include "engine/model/loader.h"
#include "engine/trace/trace_fields.h"
#include "tests/engine/test_util.h"

// Counting global allocation, switched on only inside the no-allocation test. Sanitizers own the
// allocator (and pair every allocation function with its own deallocation), so under them the
// allocator is left alone and the no-allocation test is skipped.
#define HL_COUNT_ALLOCATIONS (!HL_SANITIZED_ALLOCATOR)  // test_util.h
namespace {
std::atomic<bool> g_count{false};
std::atomic<int64_t> g_allocs{0};
}  // namespace
#if HL_COUNT_ALLOCATIONS
void* operator new(std::size_t n) {
  if (g_count.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  if (g_count.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n ? n : 1);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
#endif

using namespace hl;
using namespace hl::cpu;

namespace {

std::vector<const simd::Kernels*> all_kernels() {
  std::vector<const simd::Kernels*> ks;
  for (simd::Isa isa : {simd::Isa::Portable, simd::Isa::Avx2, simd::Isa::Avx512})
    if (const simd::Kernels* k = simd::kernels_for(isa)) ks.push_back(k);
  return ks;
}

// n values in [-1, 1) stored as dtype t, and their exact float values.
void random_weights(DType t, int64_t n, std::mt19937& rng, std::vector<uint8_t>* bytes, std::vector<float>* exact) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  bytes->assign(static_cast<size_t>(n * dtype_size(t)), 0);
  from_float(t, v.data(), bytes->data(), static_cast<size_t>(n));
  exact->resize(static_cast<size_t>(n));
  to_float(t, bytes->data(), exact->data(), static_cast<size_t>(n));
}

}  // namespace

// The element-wise kernels give every element the same value however a range is split (the pool
// may hand a thread any run of pieces, and a Mamba layer's convolution runs on the rows of in_proj a
// thread just wrote): whole range against pieces at odd offsets, bit for bit, on every ISA. Before,
// the last n % L elements of a call took a scalar formula: a pipeline of stages and one process
// then differed in a quantised decode (Pipeline.QuantisedOnLoad_RecordsEqualOneProcess, 2 runs in
// 10 under load).
TEST(CpuKernels, ElementWise_SameBitsHoweverTheRangeIsSplit) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> d(-30.0f, 30.0f);
  const int64_t n = 1000;
  std::vector<float> x(n), u(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = d(rng);
    u[i] = d(rng) / 30.0f;
  }
  for (const simd::Kernels* k : all_kernels()) {
    using Fn = void (*)(const simd::Kernels&, float*, const float*, int64_t);
    const std::pair<const char*, Fn> ops[] = {
        {"silu", [](const simd::Kernels& kk, float* a, const float*, int64_t m) { kk.silu(a, m); }},
        {"softplus", [](const simd::Kernels& kk, float* a, const float*, int64_t m) { kk.softplus(a, m); }},
        {"silu_mul", [](const simd::Kernels& kk, float* a, const float* b, int64_t m) { kk.silu_mul(a, b, m); }}};
    for (const auto& [name, fn] : ops) {
      std::vector<float> whole = x, split = x;
      fn(*k, whole.data(), u.data(), n);
      for (int64_t b = 0, step = 7; b < n; b += step, step = step * 3 % 61 + 1)
        fn(*k, split.data() + b, u.data() + b, std::min(step, n - b));
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(std::memcmp(&whole[i], &split[i], sizeof(float)), 0)
            << k->name << " " << name << " element " << i << ": " << whole[i] << " vs " << split[i];
    }
  }
}

TEST(ThreadPool, ParallelFor_EveryIndexOnce_AnyGrain) {
  ThreadPool& pool = ThreadPool::global();
  for (int64_t n : {1, 2, 7, 64, 1000, 100003})
    for (int64_t grain : {1, 3, 64, 5000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
        ASSERT_LE(0, b);
        ASSERT_LE(e, n);
        for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n " << n << " grain " << grain << " index " << i;
    }
}

// Whichever thread claims what, a chunk begins at a multiple of the grain and is at least one grain
// long (the last one may be longer): element-wise kernels whose vector groups start at a chunk's
// first element then give the same values in every run.
TEST(ThreadPool, ChunksBeginAtMultiplesOfTheGrain_AtLeastOneGrainLong) {
  ThreadPool& pool = ThreadPool::global();
  for (int64_t n : {int64_t{100}, int64_t{8191}, int64_t{1} << 20, int64_t{3} << 22})
    for (int64_t grain : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{8192}}) {
      std::atomic<int64_t> covered{0}, bad{0};
      pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
        if (b % grain != 0 || e - b < std::min(grain, n)) bad.fetch_add(1);
        covered.fetch_add(e - b);
      });
      EXPECT_EQ(bad.load(), 0) << "n " << n << " grain " << grain;
      EXPECT_EQ(covered.load(), n);
    }
}

TEST(ThreadPool, NestedParallelFor_RunsInline) {
  std::atomic<int64_t> sum{0};
  ThreadPool::global().parallel_for(8, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      ThreadPool::global().parallel_for(100, 1, [&](int64_t b2, int64_t e2) { sum.fetch_add(e2 - b2); });
  });
  EXPECT_EQ(sum.load(), 800);
}

TEST(ThreadPool, ExceptionInAChunk_RethrownAfterAllChunks_PoolStillWorks) {
  std::atomic<int64_t> done{0};
  EXPECT_THROW(ThreadPool::global().parallel_for(64, 1,
                                                 [&](int64_t b, int64_t e) {
                                                   done.fetch_add(e - b);
                                                   if (b <= 40 && 40 < e) throw std::runtime_error("chunk 40");
                                                 }),
               std::runtime_error);
  EXPECT_EQ(done.load(), 64);
  std::atomic<int64_t> sum{0};
  ThreadPool::global().parallel_for(1000, 1, [&](int64_t b, int64_t e) { sum.fetch_add(e - b); });
  EXPECT_EQ(sum.load(), 1000);
}

TEST(SimdKernels, Matvec_EveryIsaAndDtype_WithinFp32RoundingOfFloat64) {
  std::mt19937 rng(7);
  for (const simd::Kernels* k : all_kernels())
    for (DType t : {DType::BF16, DType::F16, DType::F32})
      for (int64_t rows : {1, 5, 33})
        for (int64_t cols : {1, 7, 16, 31, 64, 100, 513}) {
          std::vector<uint8_t> w;
          std::vector<float> we, x(static_cast<size_t>(cols)), y(static_cast<size_t>(rows));
          random_weights(t, rows * cols, rng, &w, &we);
          std::uniform_real_distribution<float> d(-2.0f, 2.0f);
          for (float& v : x) v = d(rng);
          k->matvec(t, w.data(), rows, cols, x.data(), y.data());
          for (int64_t r = 0; r < rows; ++r) {
            double exact = 0, mag = 0;
            for (int64_t c = 0; c < cols; ++c) {
              exact += static_cast<double>(we[r * cols + c]) * x[c];
              mag += std::fabs(static_cast<double>(we[r * cols + c]) * x[c]);
            }
            const double bound = static_cast<double>(cols + 2) * std::ldexp(1.0, -24) * mag + 1e-30;
            ASSERT_NEAR(y[r], exact, bound)
                << k->name << " " << dtype_name(t) << " rows " << rows << " cols " << cols << " row " << r;
          }
        }
}

TEST(SimdKernels, Widen_EveryIsa_EqualsToFloat) {
  std::mt19937 rng(3);
  for (const simd::Kernels* k : all_kernels())
    for (DType t : {DType::BF16, DType::F16, DType::F32})
      for (int64_t n : {1, 15, 16, 17, 1000}) {
        std::vector<uint8_t> w;
        std::vector<float> exact, got(static_cast<size_t>(n));
        random_weights(t, n, rng, &w, &exact);
        k->widen(t, w.data(), got.data(), n);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], exact[i]) << k->name << " " << dtype_name(t) << " at " << i;
      }
}

TEST(SimdKernels, SiluMulAndDotAndAxpy_EveryIsa_MatchPortable) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> d(-30.0f, 30.0f);
  const simd::Kernels& ref = simd::portable();
  for (const simd::Kernels* k : all_kernels()) {
    const int64_t n = 77;
    std::vector<float> a(n), b(n), g1, g2;
    for (int64_t i = 0; i < n; ++i) {
      a[i] = d(rng);
      b[i] = d(rng) / 30.0f;
    }
    a[0] = -200.0f;  // exp(200) overflows: silu → -0, as the reference
    a[1] = 100.0f;
    g1 = a;
    g2 = a;
    ref.silu_mul(g1.data(), b.data(), n);
    k->silu_mul(g2.data(), b.data(), n);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_NEAR(g2[i], g1[i], 4e-7 * std::fabs(g1[i]) + 1e-30) << k->name << " at " << i;
    double mag = 0;
    for (int64_t i = 0; i < n; ++i) mag += std::fabs(a[i] * b[i]);
    EXPECT_NEAR(k->dot(a.data(), b.data(), n), ref.dot(a.data(), b.data(), n), 2 * n * 6e-8 * mag) << k->name;
    std::vector<float> y1 = b, y2 = b;
    ref.axpy(0.37f, a.data(), y1.data(), n);
    k->axpy(0.37f, a.data(), y2.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y2[i], y1[i], 1e-6 * (std::fabs(y1[i]) + 1)) << k->name;
    // Attention rows: 5 rows of 19 (stride 23), logits and the weighted sum.
    std::vector<float> rows(5 * 23);
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = a[i % n] * (i % 2 ? 0.5f : -1.0f);
    std::vector<float> z1(5), z2(5), o1(19, 0.5f), o2(19, 0.5f);
    ref.dot_rows(b.data(), rows.data(), 23, 5, 19, 0.25f, z1.data());
    k->dot_rows(b.data(), rows.data(), 23, 5, 19, 0.25f, z2.data());
    for (int j = 0; j < 5; ++j) ASSERT_NEAR(z2[j], z1[j], 1e-5 * (std::fabs(z1[j]) + 1)) << k->name;
    ref.axpy_rows(b.data(), rows.data(), 23, 3, 19, o1.data());
    k->axpy_rows(b.data(), rows.data(), 23, 3, 19, o2.data());
    for (int c = 0; c < 19; ++c) ASSERT_NEAR(o2[c], o1[c], 1e-5 * (std::fabs(o1[c]) + 1)) << k->name;
  }
}

// exp (the hidden attention's decays): within 2 ulp of libm over the decays' range (x ≤ 0) and beyond.
TEST(SimdKernels, Exp_EveryIsa_WithinTwoUlpOfLibm) {
  std::vector<float> v;
  for (int i = -9000; i <= 1000; ++i) v.push_back(static_cast<float>(i) / 100.0f);  // [-90, 10]
  for (float x : {0.0f, -0.0f, -87.3f, -103.9f, 88.7f}) v.push_back(x);
  for (const simd::Kernels* k : all_kernels()) {
    std::vector<float> got = v;
    k->exp(got.data(), static_cast<int64_t>(got.size()));
    for (size_t i = 0; i < v.size(); ++i) {
      const float want = std::exp(v[i]);
      const float ulp = std::max(std::nextafter(want, INFINITY) - want, 1e-44f);
      ASSERT_LE(std::fabs(got[i] - want), 2 * ulp) << k->name << " exp(" << v[i] << ") = " << got[i] << ", libm " << want;
    }
  }
}

TEST(SimdKernels, Softplus_EveryIsa_WithinFourUlpOfLibm) {
  std::vector<float> v;
  for (int i = -6144; i <= 2048; ++i) v.push_back(static_cast<float>(i) / 51.2f);  // [-120, 40] step 1/51.2
  for (float x : {0.0f, -0.0f, 20.0f, 19.999998f, 20.000002f, 1e-8f, -1e-8f, 88.0f, -88.0f}) v.push_back(x);
  v.push_back(std::numeric_limits<float>::infinity());
  v.push_back(-std::numeric_limits<float>::infinity());
  v.push_back(std::numeric_limits<float>::quiet_NaN());
  for (const simd::Kernels* k : all_kernels()) {
    std::vector<float> want = v, got = v;
    simd::portable().softplus(want.data(), static_cast<int64_t>(want.size()));
    k->softplus(got.data(), static_cast<int64_t>(got.size()));
    for (size_t i = 0; i < v.size(); ++i) {
      if (std::isnan(want[i]) || std::isinf(want[i])) {
        ASSERT_TRUE(std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i])
            << k->name << " softplus(" << v[i] << ")";
        continue;
      }
      const float ulp = std::max(std::nextafter(std::fabs(want[i]), INFINITY) - std::fabs(want[i]), 1e-44f);
      ASSERT_LE(std::fabs(got[i] - want[i]), 4 * ulp)
          << k->name << " softplus(" << v[i] << ") = " << got[i] << ", libm " << want[i];
    }
  }
}

TEST(SimdKernels, Scan_EveryIsa_MatchesPortableLoop) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (const simd::Kernels* k : all_kernels())
    for (int64_t N : {8, 16, 5})
      for (int64_t Di : {16, 40, 64}) {
        const int64_t S = 9;
        const int64_t tiled = simd::tiled_size(Di, N);  // state and A in channel tiles
        std::vector<float> dt(S * Di), u(S * Di), z(S * 2 * Di), B(S * N), C(S * N), A(tiled), D(Di);
        for (float& v : dt) v = 0.5f * (d(rng) + 1.0f);
        for (float& v : u) v = d(rng);
        for (float& v : z) v = 4.0f * d(rng);
        for (float& v : B) v = d(rng);
        for (float& v : C) v = d(rng);
        for (float& v : A) v = -std::exp(2.0f * d(rng));
        for (float& v : D) v = d(rng);
        std::vector<float> h0(tiled);
        for (float& v : h0) v = d(rng);
        auto run = [&](void (*scan)(const simd::ScanArgs&, int64_t, int64_t), std::vector<float>& h,
                       std::vector<float>& out, std::vector<float>& ret) {
          h = h0;
          out.assign(S * Di, 0.0f);
          ret.assign(S * Di, 0.0f);
          simd::ScanArgs a;
          a.S = S, a.Di = Di, a.N = N, a.dt = dt.data(), a.u = u.data(), a.z = z.data() + Di, a.z_stride = 2 * Di;
          a.B = B.data(), a.C = C.data(), a.A = A.data(), a.D = D.data(), a.h = h.data(), a.out = out.data();
          a.retained = ret.data();
          scan(a, 0, 16);  // three calls, as the thread pool splits channels (and one unaligned)
          scan(a, 16, Di / 2 + 3);
          scan(a, Di / 2 + 3, Di);
        };
        std::vector<float> h1, o1, r1, h2, o2, r2;
        run(simd::scan_portable, h1, o1, r1);
        run(k->scan, h2, o2, r2);
        for (size_t i = 0; i < h1.size(); ++i) ASSERT_NEAR(h2[i], h1[i], 1e-5 * (std::fabs(h1[i]) + 1)) << k->name;
        for (size_t i = 0; i < o1.size(); ++i) ASSERT_NEAR(o2[i], o1[i], 1e-5 * (std::fabs(o1[i]) + 1)) << k->name;
        for (size_t i = 0; i < r1.size(); ++i) ASSERT_NEAR(r2[i], r1[i], 1e-6) << k->name;
      }
}

TEST(CpuOps, LinearPrefill_EqualsReferenceLoop) {
  std::mt19937 rng(9);
  for (DType t : {DType::BF16, DType::F32}) {
    const int64_t rows = 300, cols = 96, S = 37;
    std::vector<uint8_t> w;
    std::vector<float> we, x(S * cols), y(S * rows), yr(S * rows);
    random_weights(t, rows * cols, rng, &w, &we);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    for (float& v : x) v = d(rng);
    Mat m;
    m.dtype = t, m.data = w.data(), m.rows = rows, m.cols = cols;
    linear(m, x.data(), S, y.data());
    linear_rows_ref(m, 0, rows, x.data(), S, yr.data());
    for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], yr[i], 2e-5 * (std::fabs(yr[i]) + 1)) << "at " << i;
  }
}

class DemoModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    GenerateOptions o;
    o.config = preset_config("demo-random");
    o.seed = 3;
    generate_checkpoint(dir_->path, o);
    model_ = load_model(dir_->path);
  }
  static void TearDownTestSuite() {
    model_.reset();
    delete dir_;
  }
  static test::TempDir* dir_;
  static std::shared_ptr<Model> model_;
};
test::TempDir* DemoModel::dir_ = nullptr;
std::shared_ptr<Model> DemoModel::model_;

// Heap allocations a record's own vectors account for (one per non-empty vector of the trace
// field table, trace_fields.h).
int64_t record_allocations(const TokenTrace& r) {
  int64_t n = 0;
  for (const TraceField& f : trace_fields())
    if (f.fvec || f.ivec) n += (f.fvec ? (r.*f.fvec).empty() : (r.*f.ivec).empty()) ? 0 : 1;
  return n;
}

TEST_F(DemoModel, DecodeStep_AllocatesOnlyItsRecord) {
  if (!HL_COUNT_ALLOCATIONS) GTEST_SKIP() << "allocation counting is off under the sanitizers";
  for (bool instruments : {false, true}) {
    auto b = make_backend("cpu", model_);
    RunOptions o;
    o.instruments = instruments;
    b->start(o);
    std::vector<TokenTrace> recs;
    recs.reserve(64);
    for (int32_t id = 0; id < 4; ++id) b->forward(&id, 1, &recs);  // warm: scratch sized for S = 1
    for (int32_t id = 4; id < 40; ++id) {
      g_allocs.store(0);
      g_count.store(true);
      b->forward(&id, 1, &recs);
      g_count.store(false);
      ASSERT_EQ(g_allocs.load(), record_allocations(recs.back()))
          << "decode step " << id << " allocated beyond its TokenTrace (instruments " << instruments << ")";
    }
  }
}

TEST_F(DemoModel, PrefillWithBlas_EqualsStepByStepDecode) {
  std::vector<int32_t> ids(70);
  for (int i = 0; i < 70; ++i) ids[i] = (i * 977 + 13) % static_cast<int32_t>(model_->config.vocab_size);
  auto b = make_backend("cpu", model_);
  std::vector<TokenTrace> step, pre;
  b->start(RunOptions{});
  for (int32_t id : ids) b->forward(&id, 1, &step);
  b->start(RunOptions{});
  b->forward(ids.data(), static_cast<int64_t>(ids.size()), &pre);
  ASSERT_EQ(step.size(), pre.size());
  for (size_t t = 0; t < step.size(); ++t) {
    double scale = 0;
    for (float v : step[t].logits) scale = std::max(scale, static_cast<double>(std::fabs(v)));
    for (size_t i = 0; i < step[t].logits.size(); ++i)
      ASSERT_NEAR(pre[t].logits[i], step[t].logits[i], 1e-5 * scale) << "token " << t << " logit " << i;
    ASSERT_EQ(pre[t].router_topk, step[t].router_topk) << "token " << t;
  }
}
