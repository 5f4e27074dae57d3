// A matrix of the model as the kernels read it: a row-major (rows, cols) view in its stored dtype
// with its tensor name. Its own header so that a mixer kind's weights header (model/mixer_<kind>.h)
// can hold matrices without including weights.h, which includes those headers.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/dtype.h"

namespace hl {

// A row-major (rows, cols) matrix view in its stored dtype: PyTorch nn.Linear layout (out, in). In a
// block type (Q8_0, Q4_K, ...) each row is cols / block whole blocks, rows one after another.
struct Mat {
  DType dtype = DType::F32;
  const void* data = nullptr;
  int64_t rows = 0, cols = 0;
  std::string name;  // tensor name, for messages and the DoRA view
  // CPU decode of a Q8_0, Q4_K or Q6_K matrix: false (the default, as llama.cpp) rounds the input
  // vector to 8 bits per block and dots in integers; true keeps it in fp32, so that the product is the
  // dequantised matrix times x (`--weights FORMAT+fp32-activations`; resources/docs/quantization.md).
  bool fp32_activations = false;
  // A Q4_K or Q8_0 matrix laid out for the CPU's product in groups of 16 rows (core/rows16.h;
  // quantise on load sets it where rows16_preferred()). Sizes and row_ptr(r) of a group's first row r are as
  // in ggml's layout, but one row's bytes are not at row_ptr(r): read rows through plain_rows.
  bool rows16 = false;
  bool empty() const { return data == nullptr; }
  int64_t row_bytes() const { return dtype_row_bytes(dtype, cols); }
  int64_t bytes() const { return rows * row_bytes(); }
  const uint8_t* row_ptr(int64_t r) const { return static_cast<const uint8_t*>(data) + r * row_bytes(); }
};

// The bytes of rows [r0, r0 + n) of W in ggml's row-major layout: W.row_ptr(r0) itself, or (rows16)
// those rows taken out of their groups into `scratch`, which the pointer then points into.
const uint8_t* plain_rows(const Mat& W, int64_t r0, int64_t n, std::vector<uint8_t>& scratch);

}  // namespace hl
