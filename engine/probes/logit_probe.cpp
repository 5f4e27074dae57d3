// next_token_entropy_pooled (logit_probe.h): the blocks of next_token_entropy on the thread pool.
// Each block's maximum and float sums are the same values on any thread; only the folding into m
// and into the double sums is ordered, and it runs here in block order, as next_token_entropy does.
#include "engine/probes/logit_probe.h"

#include <vector>

#include "engine/core/thread_pool.h"

namespace hl {

float next_token_entropy_pooled(const float* z, size_t n) {
  using namespace logit_detail;
  constexpr size_t kGrain = 8;  // blocks per piece of work: 8,192 logits, ~10 µs on one core
  const size_t nb = blocks_of(n);
  if (n == 0 || nb < 2 * kGrain) return next_token_entropy(z, n);
  thread_local std::vector<BlockMax> maxima;  // grown once to the vocabulary's blocks, then reused
  thread_local std::vector<BlockSums> sums;
  if (maxima.size() < nb) maxima.resize(nb);
  if (sums.size() < nb) sums.resize(nb);
  BlockMax* mx = maxima.data();
  BlockSums* bs = sums.data();
  const int64_t blocks = static_cast<int64_t>(nb);
  ThreadPool::global().parallel_for(blocks, kGrain, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) mx[k] = block_max(z, n, static_cast<size_t>(k));
  });
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float m = -std::numeric_limits<float>::infinity();
  for (size_t k = 0; k < nb; ++k)
    if (!fold_max(mx[k], m)) return nan;
  m = tail_max(z, n, m);
  if (std::isnan(m)) return nan;
  ThreadPool::global().parallel_for(blocks, kGrain, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) bs[k] = block_sums(z, n, static_cast<size_t>(k), m);
  });
  double s = 0, sz = 0;
  for (size_t k = 0; k < nb; ++k) fold_sums(bs[k], s, sz);
  return entropy_of(z, n, m, s, sz);
}

}  // namespace hl
