// What the backends share around their kernels: the non-finite flags of the head, the register feed
// of a device backend's start() and the token loop of its forward() (Vulkan, CUDA). The numbering of
// the layers by kind is the model's LayerSchedule (model/layer_schedule.h).
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/core/error.h"
#include "engine/model/token_trace.h"

namespace hl {

// The weight types the device kernels read, indexed by the code those kernels use for them
// (shaders/common.glsl's DT_*, cuda/cuda_math.h's kF32 .. kQ6_K): F32, F16, BF16 and ggml's blocks
// (core/ggml_quant.h). The Vulkan and CUDA uploads widen every other type to F32.
inline constexpr DType kDeviceWeightTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0,
                                               DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K};

// The device code of a matrix of type t, or -1 for a type no device kernel reads (Q4_1, Q2_K, Q3_K,
// IQ4_NL, IQ4_XS).
inline int device_weight_code(DType t) {
  for (int c = 0; c < static_cast<int>(std::size(kDeviceWeightTypes)); ++c)
    if (kDeviceWeightTypes[c] == t) return c;
  return -1;
}

// The final norm and the LM head in nonfinite_layer (token_trace.h) for a backend that does not read
// the final norm's output back (Vulkan, CUDA): when r.nonfinite_layer is still −1 (every layer's
// output finite) and a logit is NaN or Inf, L if the final norm can make a finite residual
// non-finite, else L + 1. Since |h_i · rsqrt(mean(h²) + eps)| ≤ √H, only a norm weight that is NaN,
// Inf or above FLT_MAX / √H can; the CPU backend checks the norm's output itself and agrees.
// Calls finish_record first (so the derived fields of the table are set as on every backend).
void flag_nonfinite_head(TokenTrace& r, const Model& m, const RunOptions& opts);

// The register feed of a device backend's start(): n_reg register rows, the trained rows first, then
// the mean embedding row (row `trained`), as ids -row-1, in blocks of at most block_limit() rows;
// per block of n rows, prepare(n) (the block buffers), then run(ids, n).
template <class Limit, class Prepare, class Run>
void feed_registers(int n_reg, int64_t trained, Limit&& block_limit, Prepare&& prepare, Run&& run) {
  std::vector<int32_t> ids(static_cast<size_t>(n_reg));
  for (int r = 0; r < n_reg; ++r) ids[r] = -1 - static_cast<int32_t>(std::min<int64_t>(r, trained));
  for (int64_t done = 0; done < n_reg;) {
    const int64_t n = std::min<int64_t>(n_reg - done, block_limit());
    prepare(n);
    run(&ids[done], n);
    done += n;
  }
}

// The body of a device backend's forward(): checks the context bound (RunOptions::max_context) and
// the token ids before any state changes, appends S records to *out, and runs the tokens in blocks
// of at most block_limit() tokens. Per call, reserve(S) first (the KV cache); per block of n tokens,
// prepare(n) (the block buffers), then the block's records are initialised (init_token_trace with
// the schedule `sched` and `registers` at `position` onwards), run(ids, n, recs) runs the block and reads its records, and
// `position` advances by n. A BackendFailure stores its message in `failed` (the backend refuses
// from then on), removes the records this call appended (the caller's stay as they were) and is
// rethrown. step_seconds is the call's time shared evenly over its tokens.
template <class Reserve, class Limit, class Prepare, class Run>
void forward_in_blocks(const int32_t* tokens, int64_t S, std::vector<TokenTrace>* out, const JambaConfig& cfg,
                       const RunOptions& opts, const LayerSchedule& sched, int64_t registers, int64_t& position,
                       std::string& failed,
                       Reserve&& reserve, Limit&& block_limit, Prepare&& prepare, Run&& run) {
  if (S <= 0) return;
  check_context(opts, cfg, position, S);  // RunOptions::max_context, before any state changes
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t V = cfg.vocab_size;
  for (int64_t s = 0; s < S; ++s)
    if (tokens[s] < 0 || tokens[s] >= V)
      throw Error("token id " + std::to_string(tokens[s]) + " is out of range [0, " + std::to_string(V) + ")");
  const size_t first = out->size();
  out->resize(first + static_cast<size_t>(S));
  try {
    reserve(S);
    for (int64_t done = 0; done < S;) {
      const int64_t n = std::min<int64_t>(S - done, block_limit());
      prepare(n);
      TokenTrace* recs = &(*out)[first + static_cast<size_t>(done)];
      for (int64_t s = 0; s < n; ++s) init_token_trace(recs[s], cfg, sched, registers, opts, tokens[done + s], position + s);
      run(tokens + done, n, recs);
      position += n;
      done += n;
    }
  } catch (const BackendFailure& e) {
    failed = e.what();
    out->resize(first);
    throw;
  }
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int64_t s = 0; s < S; ++s) (*out)[first + s].step_seconds = dt / static_cast<double>(S);
}

}  // namespace hl
