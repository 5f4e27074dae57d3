// ggml's weight formats (the ggml project's block layouts and its scalar reference code): bit-exact
// dequantization of F32, F16, BF16, Q4_0, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K and of the
// dequantize-only Q4_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS, and the reference quantizers of the first ten
// (ggml's quantize_row_*_ref, which llama-quantize uses without an importance matrix), byte-exact with
// ggml's C and with tools/reference/gguf/ggml_quants.py.
// The layouts and the order of every float operation are specified in tools/reference/gguf/GGUF.md §4.
//
// Element order is ggml's: a row of n values is n / block consecutive blocks, and consecutive rows are
// consecutive blocks too, so a whole tensor whose ne[0] is a multiple of the block is one "row" here.
// Byte pointers may have any alignment (GGUF data may be 1-, 2- or 4-aligned).
// Exactness: evaluated in float32 without fused multiply-add (the ggml_quant*.cpp files are compiled with
// -ffp-contract=off), so results are the same on every IEEE platform, signed zeros included (an
// all-zero Q4_0/Q5_0/Q6_K/IQ4_NL block dequantizes to -0.0, GGUF.md §4.1, §4.3).
// Scalar, simple loops; fast decode kernels are elsewhere. No dependency on the GGUF reader.
#pragma once
#include <cstdint>
#include <string>

namespace hl {

// A format this file computes with. Ids are ggml's (GgmlType in engine/io/gguf.h).
struct GgmlBlockFormat {
  uint32_t type = 0;        // ggml type id
  const char* name = "";    // "Q4_K"
  int64_t block = 1;        // elements per block
  int64_t block_bytes = 0;  // bytes per block
};

// The format of `type`, or null when it is not one of the fifteen above (Q8_1, Q8_K, IQ2_*, IQ3_*,
// IQ1_*, TQ*, MXFP4, ... are not).
const GgmlBlockFormat* ggml_block_format(uint32_t type);
bool ggml_can_dequantize(uint32_t type);  // the fifteen types
bool ggml_can_quantize(uint32_t type);    // the first ten (not Q4_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS)

// The names of the dequantizable types in ggml id order, ", "-separated ("F32, F16, Q4_0, Q4_1, ...,
// BF16"), for messages.
std::string ggml_dequantizable_names();

// Bytes of n elements of `type`; -1 when the type is not supported, n < 0, n is not a multiple of the
// block, or the size does not fit int64.
int64_t ggml_row_bytes(uint32_t type, int64_t n);

// dst[0..n) = the values of the ggml_row_bytes(type, n) bytes at src (the caller guarantees that src
// holds them). Throws hl::Error for an unsupported type or a bad n; checks nothing else.
void ggml_dequantize_row(uint32_t type, const uint8_t* src, float* dst, int64_t n);

// The ggml_row_bytes(type, n) bytes ggml's reference quantizer writes for src[0..n). Throws hl::Error
// for a type ggml_can_quantize refuses (the dequantize-only five included) or a bad n. Inputs must be finite for a meaningful result (the caller checks,
// as llama-quantize does); non-finite inputs give defined but unspecified bytes.
void ggml_quantize_row(uint32_t type, const float* src, uint8_t* dst, int64_t n);

}  // namespace hl
