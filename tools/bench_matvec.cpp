// hl-bench-matvec: one thread's decode matrix–vector product per ISA and weight format, x in fp32
// (Kernels::matvec) against x rounded to 8 bits with integer dots (Kernels::matvec_x8), on a matrix
// in memory (8192 × 4096: the bytes), on 128 matrices of 2048 × 512 in memory read in turn (the
// decode's shapes: a row of 512 is two K-quant blocks, so what a call or a pass of rows costs beyond
// the blocks shows) and on one that stays in cache (256 × 2048: the arithmetic).
// Prints G weights/s and GB/s, best of `reps` timings. Then the decode's own setting: 256 matrices
// of 2048 × 512 with every product split over the thread pool as the CPU backend splits it, BF16 (x in fp32) against Q8_0 and Q4_K (x in int8; in 16-row groups too, where the kernels read them) on the best ISA, the formats
// taken in turn within each repetition so that a change in the machine's speed lands on all of
// them; printed with each format's time against BF16's.
// Usage: hl-bench-matvec [reps, default 5] [pooled: the decode's setting alone].
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/cpu/cpu_simd.h"
#include "engine/core/rows16.h"
#include "engine/core/thread_pool.h"
#include "engine/model/mat.h"

using namespace hl;
using cpu::simd::Kernels;

// Every 16 rows of q (format t, rows of `cols`) rearranged into a group (core/rows16.h).
static std::vector<uint8_t> grouped(DType t, const std::vector<uint8_t>& q, int64_t cols) {
  std::vector<uint8_t> p(q.size());
  rows16_pack_rows(t, q.data(), static_cast<int64_t>(q.size()) / dtype_row_bytes(t, cols), cols, p.data());
  return p;
}

// The decode's setting (see the top): BF16, Q8_0 and Q4_K products over the pool, in turn.
static void pooled(int reps, std::mt19937& rng) {
  const int64_t rows = 2048, cols = 512, mats = 256;
  std::normal_distribution<float> g(0.0f, 0.05f);
  std::vector<float> w(static_cast<size_t>(rows * cols)), x(static_cast<size_t>(cols)), y(static_cast<size_t>(rows));
  for (float& v : w) v = g(rng);
  for (float& v : x) v = g(rng) * 20;
  const Kernels& k = cpu::simd::kernels();
  ThreadPool& pool = ThreadPool::global();
  // The last two: Q8_0 and Q4_K in 16-row groups (Mat::rows16), where this CPU's kernels read them.
  const DType types[] = {DType::BF16, DType::Q8_0, DType::Q4_K, DType::Q8_0, DType::Q4_K};
  const int n = k.matvec_rows16 ? 5 : 3;
  std::vector<uint8_t> q[5];
  double best[5] = {1e30, 1e30, 1e30, 1e30, 1e30};
  for (int i = 0; i < n; ++i) {
    const size_t mb = static_cast<size_t>(rows * dtype_row_bytes(types[i], cols));
    q[i].resize(mb * static_cast<size_t>(mats));
    for (int64_t m = 0; m < mats; ++m) from_float(types[i], w.data(), q[i].data() + m * mb, w.size());
    if (i >= 3) q[i] = grouped(types[i], q[i], cols);
  }
  for (int r = 0; r < reps; ++r)
    for (int i = 0; i < n; ++i) {
      Mat M;  // each product as the backend runs it: matvec_rows over the pool's pieces
      M.dtype = types[i], M.rows = rows, M.cols = cols, M.rows16 = i >= 3;
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t m = 0; m < mats; ++m) {
        M.data = q[i].data() + m * rows * M.row_bytes();
        pool.parallel_for(rows, cpu::matvec_grain(M), [&](int64_t a, int64_t b) {
          cpu::matvec_rows(M, a, b - a, x.data(), y.data() + a);  // BF16: fp32 x
        });
      }
      best[i] = std::min(best[i], std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  for (int i = 0; i < n; ++i)
    std::printf("pooled %-8s %-5s%s x %-4s  %6.2f G weights/s  %6.2f GB/s  %d threads  time x%.2f vs BF16\n", k.name,
                dtype_name(types[i]), i >= 3 ? "/16" : "   ", cpu::simd::has_x8_path(types[i]) ? "int8" : "fp32",
                static_cast<double>(rows * cols * mats) / best[i] / 1e9, static_cast<double>(q[i].size()) / best[i] / 1e9,
                pool.size(), best[0] / best[i]);
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  std::mt19937 rng(1);
  if (argc > 2 && std::string(argv[2]) == "pooled") return pooled(reps, rng), 0;
  std::normal_distribution<float> g(0.0f, 0.05f);
  struct Size {
    const char* what;
    int64_t rows, cols, calls;
    int64_t mats;  // distinct matrices, read in turn by the calls
  };
  for (const Size s : {Size{"memory", 8192, 4096, 1, 1}, Size{"small", 2048, 512, 128, 128}, Size{"cache", 256, 2048, 64, 1}}) {
    std::vector<float> w(static_cast<size_t>(s.rows * s.cols)), x(static_cast<size_t>(s.cols)), y(static_cast<size_t>(s.rows));
    for (float& v : w) v = g(rng);
    for (float& v : x) v = g(rng) * 20;
    for (DType t : {DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q5_0, DType::Q6_K, DType::Q5_K, DType::Q4_K}) {
      const size_t mb = static_cast<size_t>(s.rows * dtype_row_bytes(t, s.cols));  // one matrix
      std::vector<uint8_t> q(mb * static_cast<size_t>(s.mats));
      for (int64_t m = 0; m < s.mats; ++m) from_float(t, w.data(), q.data() + m * mb, w.size());
      for (cpu::simd::Isa isa : {cpu::simd::Isa::Portable, cpu::simd::Isa::Avx2, cpu::simd::Isa::Avx512}) {
        const Kernels* k = cpu::simd::kernels_for(isa);
        if (!k || (isa == cpu::simd::Isa::Portable && (s.calls == 1 || s.mats > 1))) continue;  // portable: in cache only
        for (bool x8 : {false, true}) {
          if (x8 && !cpu::simd::has_x8_path(t)) continue;
          double best = 1e30;
          for (int r = 0; r < reps; ++r) {
            const auto t0 = std::chrono::steady_clock::now();
            for (int64_t c = 0; c < s.calls; ++c) (x8 ? k->matvec_x8 : k->matvec)(t, q.data() + (c % s.mats) * mb, s.rows, s.cols, x.data(), y.data());
            best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
          }
          const double n = static_cast<double>(s.rows * s.cols * s.calls);
          std::printf("%-6s %-8s %-5s x %-4s  %6.2f G weights/s  %6.2f GB/s\n", s.what, k->name, dtype_name(t),
                      x8 ? "int8" : "fp32", n / best / 1e9, static_cast<double>(mb) * static_cast<double>(s.calls) / best / 1e9);
        }
        if (rows16_format(t) && k->matvec_rows16) {  // the same rows in 16-row groups (Mat::rows16)
          const std::vector<uint8_t> p = grouped(t, q, s.cols);
          double best = 1e30;
          for (int r = 0; r < reps; ++r) {
            const auto t0 = std::chrono::steady_clock::now();
            for (int64_t c = 0; c < s.calls; ++c)
              k->matvec_rows16(t, p.data() + (c % s.mats) * mb, s.rows / 16, s.cols, x.data(), y.data());
            best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
          }
          const double n = static_cast<double>(s.rows * s.cols * s.calls);
          std::printf("%-6s %-8s %-5s x int8  %6.2f G weights/s  %6.2f GB/s  (16-row groups)\n", s.what, k->name, dtype_name(t),
                      n / best / 1e9, static_cast<double>(mb) * static_cast<double>(s.calls) / best / 1e9);
        }
      }
    }
  }
  pooled(reps, rng);
  return 0;
}
