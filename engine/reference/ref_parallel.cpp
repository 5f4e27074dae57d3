// The reference forward's unit for Falcon-H1's parallel layer (HF FalconH1DecoderLayer): the attention
// and the Mamba-2 units of this layer, each made by its own kind's maker, run on the same normalised
// row x; y = ssm_out_multiplier · mamba(ssm_in_multiplier · x)
//          + attention_out_multiplier · attention(attention_in_multiplier · x).
// Each part fills its own record fields (the A_n and the M_n slot of the layer).
#include "engine/reference/ref_mixer.h"

namespace hl::ref {
namespace {

class RefParallel final : public RefMixer {
 public:
  RefParallel(const Model& m, int64_t layer, const RunPlan& plan)
      : c_(m.config),
        attn_(find_module(RefMixerTable::entries(), MixerKind::Attention, "reference", layer)(m, layer, plan)),
        ssm_(find_module(RefMixerTable::entries(), MixerKind::Mamba2, "reference", layer)(m, layer, plan)) {}

  void token(const float* x, float* y, const RefRow& at) override {
    const int64_t H = c_.hidden_size;
    std::vector<float> in(static_cast<size_t>(H)), ya(static_cast<size_t>(H)), ym(static_cast<size_t>(H));
    for (int64_t c = 0; c < H; ++c) in[c] = static_cast<float>(x[c] * c_.ssm_in_multiplier);
    ssm_->token(in.data(), ym.data(), at);
    for (int64_t c = 0; c < H; ++c) in[c] = static_cast<float>(x[c] * c_.attention_in_multiplier);
    attn_->token(in.data(), ya.data(), at);
    for (int64_t c = 0; c < H; ++c)
      y[c] = static_cast<float>(static_cast<double>(ym[c] * static_cast<float>(c_.ssm_out_multiplier)) +
                                static_cast<double>(ya[c] * static_cast<float>(c_.attention_out_multiplier)));
  }

 private:
  const JambaConfig& c_;
  std::unique_ptr<RefMixer> attn_, ssm_;
};

std::unique_ptr<RefMixer> make_ref_parallel(const Model& m, int64_t layer, const RunPlan& plan) {
  return std::make_unique<RefParallel>(m, layer, plan);
}

}  // namespace

HL_REGISTER_MODULE(RefMixerTable, MixerKind::Parallel, make_ref_parallel);

}  // namespace hl::ref
