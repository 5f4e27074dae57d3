// WeightBinder (weight_binder.h): shape, dtype and value checks of each tensor bound, and the
// check that nothing in the checkpoint went unbound.
#include "engine/model/weight_binder.h"

#include <cmath>
#include <cstring>

#include "engine/core/error.h"
#include "engine/model/tensor_names.h"

namespace hl {
namespace {

// The weight types: 16/32-bit floats and, from a GGUF file kept in its stored form, ggml's blocks.
bool is_float_dtype(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || dtype_is_block(t);
}

// Index of the first NaN/Inf element, or -1.
int64_t first_nonfinite(DType t, const void* data, int64_t n, bool* is_nan) {
  if (dtype_is_block(t)) {  // dequantised a block at a time
    const int64_t blk = dtype_block(t);
    std::vector<float> v(static_cast<size_t>(blk));
    for (int64_t b = 0; b < n / blk; ++b) {
      to_float(t, static_cast<const uint8_t*>(data) + b * dtype_block_bytes(t), v.data(), v.size());
      for (int64_t j = 0; j < blk; ++j)
        if (!std::isfinite(v[static_cast<size_t>(j)])) {
          *is_nan = std::isnan(v[static_cast<size_t>(j)]);
          return b * blk + j;
        }
    }
    return -1;
  }
  for (int64_t i = 0; i < n; ++i) {
    float v;
    if (t == DType::F32)
      std::memcpy(&v, static_cast<const uint8_t*>(data) + 4 * i, 4);
    else {
      uint16_t h;
      std::memcpy(&h, static_cast<const uint8_t*>(data) + 2 * i, 2);
      v = t == DType::F16 ? f16_to_float(h) : bf16_to_float(h);
    }
    if (!std::isfinite(v)) {
      *is_nan = std::isnan(v);
      return i;
    }
  }
  return -1;
}

std::string unravel(const std::vector<int64_t>& shape, int64_t idx) {
  std::vector<int64_t> pos(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    pos[d] = shape[d] > 0 ? idx % shape[d] : 0;
    idx = shape[d] > 0 ? idx / shape[d] : 0;
  }
  return shape_to_string(pos);
}

}  // namespace

WeightBinder::WeightBinder(const Checkpoint& ck, bool scan_values, Model& m)
    : ck_(ck), scan_values_(scan_values), m_(m),
      root_(family_root(ck.config(), [&](const std::string& n) { return ck.find(n) != nullptr; })) {}

std::string WeightBinder::file_name(const std::string& name) const {
  return family_tensor_name(ck_.config(), root_, name);
}

const TensorInfo* WeightBinder::optional(const std::string& jamba_name, const std::vector<int64_t>& shape) {
  const std::string name = file_name(jamba_name);
  const TensorInfo* t = ck_.find(name);
  if (!t) return nullptr;
  used_.insert(name);
  if (t->shape != shape) {
    throw LoadError(base_name(t->file) + ": tensor '" + name + "': shape " + shape_to_string(t->shape) +
                    ", expected " + shape_to_string(shape) + " from config.json");
  }
  if (!is_float_dtype(t->dtype)) {
    throw LoadError(base_name(t->file) + ": tensor '" + name + "': dtype " + dtype_name(t->dtype) +
                    ", expected F32, F16 or BF16 (or a ggml block type from a GGUF file)");
  }
  if (scan_values_) scan(*t);
  return t;
}

const TensorInfo& WeightBinder::need(const std::string& name, const std::vector<int64_t>& shape) {
  const TensorInfo* t = optional(name, shape);
  if (!t) {
    throw LoadError(m_.name + ": missing tensor '" + file_name(name) + "' with shape " + shape_to_string(shape) +
                    " (expected from config.json)");
  }
  return *t;
}

void WeightBinder::forbid(const std::string& jamba_name, const std::string& why) {
  const std::string name = file_name(jamba_name);
  if (const TensorInfo* t = ck_.find(name)) {
    throw LoadError(base_name(t->file) + ": tensor '" + name + "' is present, but " + why);
  }
}

Mat WeightBinder::mat(const TensorInfo& t, const std::string& name) {
  Mat m;
  m.dtype = t.dtype;
  m.data = aligned(t);
  m.rows = t.shape.empty() ? 1 : t.shape[0];
  m.cols = t.shape.empty() ? 1 : t.numel() / (m.rows > 0 ? m.rows : 1);
  m.name = file_name(name);
  return m;
}

Mat WeightBinder::view(const TensorInfo& t, int64_t first, int64_t rows, int64_t cols, const std::string& name) {
  Mat m;
  m.dtype = t.dtype;
  m.data = static_cast<const uint8_t*>(aligned(t)) + dtype_row_bytes(t.dtype, first);  // first: whole rows
  m.rows = rows;
  m.cols = cols;
  m.name = file_name(name);
  return m;
}

std::vector<float> WeightBinder::vec(const TensorInfo& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  if (dtype_is_block(t.dtype) || reinterpret_cast<uintptr_t>(t.data) % static_cast<uintptr_t>(dtype_size(t.dtype)) == 0) {
    to_float(t.dtype, t.data, v.data(), v.size());
  } else {  // to_float loads whole elements: give it an aligned copy
    std::vector<uint64_t> tmp((t.nbytes() + 7) / 8);
    std::memcpy(tmp.data(), t.data, t.nbytes());
    to_float(t.dtype, tmp.data(), v.data(), v.size());
  }
  return v;
}

void WeightBinder::check_all_used() const {
  for (const TensorInfo* t : ck_.all_tensors()) {
    if (!used_.count(t->name)) {
      throw LoadError(
          base_name(t->file) + ": unexpected tensor '" + t->name + "' " + shape_to_string(t->shape) +
          ": not part of a " + std::string(family_name(ck_.config().family)) + " model with this config.json (misspelt name, or a layer of another kind?)");
    }
  }
}

const void* WeightBinder::aligned(const TensorInfo& t) {
  // Block rows are read bytewise (any alignment, as in a GGUF file).
  if (dtype_is_block(t.dtype) || reinterpret_cast<uintptr_t>(t.data) % static_cast<uintptr_t>(dtype_size(t.dtype)) == 0)
    return t.data;
  auto buf = std::make_shared<std::vector<uint64_t>>((t.nbytes() + 7) / 8);
  std::memcpy(buf->data(), t.data, t.nbytes());
  m_.keep_alive.push_back(buf);
  return buf->data();
}

void WeightBinder::scan(const TensorInfo& t) const {
  bool is_nan = false;
  int64_t i = first_nonfinite(t.dtype, t.data, t.numel(), &is_nan);
  if (i >= 0) {
    throw LoadError(base_name(t.file) + ": tensor '" + t.name + "': element " + std::to_string(i) + " at " +
                    unravel(t.shape, i) + " is " + (is_nan ? "NaN" : "Inf") + " (value scan)");
  }
}

}  // namespace hl
