// Next-token sampling: greedy, temperature, top-p (nucleus), seeded and reproducible.
#pragma once
#include <cstdint>
#include <vector>

namespace hl {

struct SamplingOptions {
  float temperature = 0.0f;  // 0: greedy (argmax, lowest id on ties)
  float top_p = 1.0f;        // keep the smallest set of tokens whose probability reaches top_p
  uint64_t seed = 0;
  bool ignore_eos = false;
};

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& o) : opts_(o), state_(o.seed ^ 0x9e3779b97f4a7c15ull) {}
  int32_t sample(const float* logits, int64_t V);
  const SamplingOptions& options() const { return opts_; }

 private:
  double uniform();  // [0, 1)
  SamplingOptions opts_;
  uint64_t state_;
  std::vector<std::pair<float, int32_t>> scratch_;
};

int32_t argmax(const float* x, int64_t n);

}  // namespace hl
