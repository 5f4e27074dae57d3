// Falcon-H1's parallel layer on the CPU backend (HF FalconH1DecoderLayer): this layer's attention and
// Mamba-2 units, each made by its own kind's maker, on the same normalised rows x (S, H);
// y = ssm_out_multiplier · mamba(ssm_in_multiplier · x) + attention_out_multiplier · attention(attention_in_multiplier · x).
// Each part keeps its own state and fills its own record fields (the layer's A_n and M_n slots).
#include "engine/backend/cpu/cpu_module.h"

namespace hl::cpu {
namespace {

struct ParallelScratch {
  std::vector<float> in, ya;  // (S, H) each: a part's scaled input, the attention's output
};

// out (n,) = m · x (m = 1: a copy).
void scaled(const float* x, int64_t n, float m, float* out) {
  for (int64_t j = 0; j < n; ++j) out[j] = m == 1.0f ? x[j] : m * x[j];
}

class CpuParallel final : public CpuMixer {
 public:
  CpuParallel(CpuRun& run, int64_t layer)
      : run_(run),
        attn_(find_module(CpuMixerTable::entries(), MixerKind::Attention, "cpu", layer)(run, layer)),
        ssm_(find_module(CpuMixerTable::entries(), MixerKind::Mamba2, "cpu", layer)(run, layer)) {}

  void start(const RunPlan& plan) override {
    attn_->start(plan);
    ssm_->start(plan);
  }

  void forward(const float* x, int64_t S, float* y, TokenTrace* const* recs) override {
    const JambaConfig& c = run_.cfg;
    const int64_t n = S * c.hidden_size;
    ParallelScratch& sc = run_.scratch<ParallelScratch>();
    float* in = grow(sc.in, n);
    float* ya = grow(sc.ya, n);
    scaled(x, n, static_cast<float>(c.ssm_in_multiplier), in);
    ssm_->forward(in, S, y, recs);
    scaled(x, n, static_cast<float>(c.attention_in_multiplier), in);
    attn_->forward(in, S, ya, recs);
    const float ms = static_cast<float>(c.ssm_out_multiplier), ma = static_cast<float>(c.attention_out_multiplier);
    for (int64_t j = 0; j < n; ++j) y[j] = ms * y[j] + ma * ya[j];
  }

 private:
  CpuRun& run_;
  std::unique_ptr<CpuMixer> attn_, ssm_;
};

std::unique_ptr<CpuMixer> make_cpu_parallel(CpuRun& run, int64_t layer) {
  return std::make_unique<CpuParallel>(run, layer);
}

}  // namespace

HL_REGISTER_MODULE(CpuMixerTable, MixerKind::Parallel, make_cpu_parallel);

}  // namespace hl::cpu
