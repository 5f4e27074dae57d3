// next_token_entropy_pooled (logit_probe.h): the blocks of next_token_entropy on the thread pool.
// Each block's maximum and float sums are the same values on any thread and in any instance of
// logit_blocks_impl.h (the baseline's, AVX2's or AVX-512's: the same lane operations in the same
// order, no fused multiply-add, this file being compiled with -ffp-contract=off); only the folding
// into m and into the double sums is ordered, and it runs here in block order, as next_token_entropy
// does. With the instruments on this runs for every token: the vocabulary's 65,536 logits took
// ~70 µs of a ~3 ms Q4_K decode step in four-lane SSE, about half of what the instruments cost.
#include "engine/probes/logit_probe.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "engine/core/thread_pool.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HL_LOGIT_WIDE 1
#pragma GCC push_options
#pragma GCC target("avx2")
namespace hl::logit_avx2 {
using logit_detail::block_end;
using logit_detail::kBlock;
using logit_detail::kLanes;
#include "engine/probes/logit_blocks_impl.h"
}  // namespace hl::logit_avx2
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx512f")
namespace hl::logit_avx512 {
using logit_detail::block_end;
using logit_detail::kBlock;
using logit_detail::kLanes;
#include "engine/probes/logit_blocks_impl.h"
}  // namespace hl::logit_avx512
#pragma GCC pop_options
#endif

namespace hl {

namespace {

struct Instance {
  void (*maxima)(const float* z, size_t n, size_t b, size_t e, float* m, unsigned char* finite);
  void (*sums)(const float* z, size_t n, size_t b, size_t e, float mx, float* s, float* sz);
};

// The widest instance this CPU runs, capped by $HL_ISA (portable, avx2) as the CPU kernels are.
const Instance& instance() {
  static const Instance chosen = [] {
#ifdef HL_LOGIT_WIDE
    __builtin_cpu_init();
    const char* cap = std::getenv("HL_ISA");
    const std::string c = cap ? cap : "";
    if (c != "portable" && c != "avx2" && __builtin_cpu_supports("avx512f"))
      return Instance{logit_avx512::maxima_of, logit_avx512::sums_of};
    if (c != "portable" && __builtin_cpu_supports("avx2")) return Instance{logit_avx2::maxima_of, logit_avx2::sums_of};
#endif
    return Instance{logit_detail::maxima_of, logit_detail::sums_of};
  }();
  return chosen;
}

}  // namespace

float next_token_entropy_pooled(const float* z, size_t n) {
  using namespace logit_detail;
  constexpr size_t kGrain = 8;  // blocks per piece of work: 8,192 logits
  const size_t nb = blocks_of(n);
  if (n == 0 || nb < 2 * kGrain) return next_token_entropy(z, n);
  thread_local std::vector<float> maxima, sums;  // grown once to the vocabulary's blocks, then reused
  thread_local std::vector<unsigned char> finite;
  if (maxima.size() < nb) maxima.resize(nb);
  if (finite.size() < nb) finite.resize(nb);
  if (sums.size() < 2 * kLanes * nb) sums.resize(2 * kLanes * nb);
  float* mx = maxima.data();
  unsigned char* ok = finite.data();
  float* s_lanes = sums.data();
  float* sz_lanes = sums.data() + kLanes * nb;
  const Instance& in = instance();
  const int64_t blocks = static_cast<int64_t>(nb);
  ThreadPool::global().parallel_for(blocks, kGrain, [&](int64_t b, int64_t e) {
    in.maxima(z, n, static_cast<size_t>(b), static_cast<size_t>(e), mx, ok);
  });
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float m = -std::numeric_limits<float>::infinity();
  for (size_t k = 0; k < nb; ++k)
    if (!fold_max(BlockMax{mx[k], ok[k] != 0}, m)) return nan;
  m = tail_max(z, n, m);
  if (std::isnan(m)) return nan;
  ThreadPool::global().parallel_for(blocks, kGrain, [&](int64_t b, int64_t e) {
    in.sums(z, n, static_cast<size_t>(b), static_cast<size_t>(e), m, s_lanes, sz_lanes);
  });
  double s = 0, sz = 0;
  for (size_t k = 0; k < nb; ++k)
    for (size_t l = 0; l < kLanes; ++l) {  // as fold_sums: block by block, lane by lane
      s += s_lanes[kLanes * k + l];
      sz += sz_lanes[kLanes * k + l];
    }
  return entropy_of(z, n, m, s, sz);
}

}  // namespace hl
