// Quantise on load (`--weights q8_0|q4_k|q6_k|...`): a bound model's large matrices rewritten in one of
// ggml's block formats (core/ggml_quant.h, ggml's reference quantisers), with the error each matrix
// took. Not the kernels that read the blocks (backend/cpu/cpu_simd*.{h,cpp}) and not GGUF files,
// whose matrices arrive already in blocks (io/gguf_import.h).
//
// The rule (resources/docs/quantization.md): quantised are the attention projections (q, k, v, o),
// the SSM input and output projections (in_proj, out_proj of Mamba-1 and Mamba-2), the dense MLP,
// every expert's and the shared expert's gate/up/down and the latent projections. Kept as they are
// stored: the embedding and the LM head (one row per token; the logits every instrument reads; the
// head is quantised too on request, `--weights q8_0+head`, and with it a tied embedding), the
// MoE routers (the router-load instrument), Mamba-1's x_proj and dt_proj (they make Δ, B and C, the
// SSM instruments' inputs; llama.cpp keeps them too), every vector (norms, biases, conv, A, D), a
// matrix whose width is not a multiple of the format's block, and a matrix already in blocks.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/model/weights.h"

namespace hl {

// One matrix of the model in the plan or the result.
struct MatQuant {
  std::string name;       // tensor name
  int64_t rows = 0, cols = 0;
  DType from = DType::F32, to = DType::F32;  // to == from when kept
  int64_t bytes_before = 0, bytes_after = 0;
  std::string kept;       // why it stays as stored; empty when quantised
  double rel_rms = 0;     // ‖W − Ŵ‖₂ / ‖W‖₂ over the whole matrix (0 when kept; 0/0 reads as 0)
};

struct WeightQuantization {
  DType format = DType::Q8_0;
  bool head = false;           // the LM head quantised too (`+head`)
  std::vector<MatQuant> mats;  // every matrix of the model, in Model::matrices() order
  int64_t bytes_before = 0, bytes_after = 0;  // all matrices
  double seconds = 0;
  int64_t quantized_count() const;
  double worst_rel_rms() const;  // over the quantised matrices
};

// The formats --weights accepts: the block types ggml's reference quantisers write (Q4_0, Q5_0, Q5_1,
// Q8_0, Q4_K, Q5_K, Q6_K), each optionally with "+head" (the LM head quantised too: *head set).
// `name` is lower or upper case; "as-stored" is not a format (nullopt). Where fp32_activations is
// given, a last "+fp32-activations" (also after "as-stored", for a GGUF file's blocks) sets it: the
// CPU's decode products then keep x in fp32 instead of rounding it to 8 bits (Mat::fp32_activations).
// Throws Error naming the option, the value and the allowed ones.
std::optional<DType> parse_weight_format(const std::string& name, const std::string& what = "--weights",
                                         bool* head = nullptr, bool* fp32_activations = nullptr);
constexpr const char* kFp32ActivationsSuffix = "+fp32-activations";
// Marks every matrix of `m` (and the model, for weights_label) to keep x in fp32 on the CPU.
void keep_fp32_activations(Model& m);
// "as-stored, q8_0, q4_k, q6_k, q4_0, q5_0, q5_1, q5_k" for help and messages.
std::string weight_format_choices();

// The --weights name of a format ("q8_0", "q4_k+head").
std::string weight_format_name(DType format, bool head);
// The --weights format a model was quantised to on load (weight_format_name), or "" for as-stored
// weights; either followed by "+fp32-activations" when keep_fp32_activations marked it.
std::string weights_label(const Model& m);

// Which matrices would be quantised and the bytes before and after, without touching any data.
WeightQuantization plan_quantization(Model& m, DType format, bool head = false);

struct QuantizeHooks {
  // After each matrix: (matrices done, total, "quantising NAME to Q4_K"); false cancels (Cancelled).
  std::function<bool(int64_t, int64_t, const std::string&)> progress;
  // A matrix's source bytes once nothing reads them any more (the loader drops their mapped pages,
  // so the stored form is never resident whole beside the quantised one).
  std::function<void(const void*, size_t)> release;
};

// Quantises the planned matrices into owned buffers (Model::keep_alive) on the thread pool and points
// them there; kept matrices are copied into owned memory too when `own_kept`, so the model no longer
// reads the checkpoint's mapping. Throws LoadError naming the tensor and element of a NaN/Inf weight
// (a block's scale would be meaningless). Records the result in m.quantization.
// Q4_K and Q8_0 matrices written here are laid out in the CPU's 16-row groups where rows16_preferred()
// says so (Mat::rows16, core/rows16.h).
void quantize_model(Model& m, DType format, bool own_kept, const QuantizeHooks& hooks = {}, bool head = false);

// The Q4_K and Q8_0 matrices a model holds in its own memory in ggml's layout (a GGUF file's)
// rearranged in place into the CPU's 16-row groups where rows16_preferred() says so; not Mamba-1's x_proj and dt_proj
// and the routers, which the probes read a row at a time. Each matrix's bytes once, whatever views share them.
void interleave_rows16(Model& m);

}  // namespace hl
