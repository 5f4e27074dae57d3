// Binding a checkpoint's tensors to a Model by name (jamba-spec.md §2.1): each with the shape the
// config implies, a float dtype, optionally a value scan, and every tensor of the file bound exactly
// once. Used by the loader and by each mixer kind's binder (mixer_ops.h); errors are one LoadError
// line naming the file, the tensor and what was expected. Not the file checks: io/checkpoint.h.
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "engine/io/checkpoint.h"
#include "engine/model/weights.h"

namespace hl {

class WeightBinder {
 public:
  // scan_values: reject NaN/Inf in each tensor bound (LoadOptions::scan_values).
  // Names given to it are Jamba's spelling; it looks them up in the family's (model/tensor_names.h).
  WeightBinder(const Checkpoint& ck, bool scan_values, Model& m);

  // The tensor if present (checked: this shape, a float dtype), else null; marks it bound.
  const TensorInfo* optional(const std::string& name, const std::vector<int64_t>& shape);
  // As optional(), but a missing tensor is a LoadError.
  const TensorInfo& need(const std::string& name, const std::vector<int64_t>& shape);
  // A tensor the config says must not exist (e.g. a bias with mamba_proj_bias false): LoadError if present.
  void forbid(const std::string& name, const std::string& why);
  bool has(const std::string& name) const { return ck_.find(file_name(name)) != nullptr; }
  // The tensor's name in this checkpoint (the family's spelling, tensor_names.h).
  std::string file_name(const std::string& name) const;

  // A matrix view in the stored dtype (copied only when the file leaves it misaligned).
  Mat mat(const TensorInfo& t, const std::string& name);
  Mat mat(const std::string& name, int64_t rows, int64_t cols) { return mat(need(name, {rows, cols}), name); }
  // A (rows, cols) view starting at element `first` of a tensor (one expert of a fused tensor).
  Mat view(const TensorInfo& t, int64_t first, int64_t rows, int64_t cols, const std::string& name);
  // A vector widened to float.
  std::vector<float> vec(const TensorInfo& t);
  std::vector<float> vec(const std::string& name, const std::vector<int64_t>& shape) { return vec(need(name, shape)); }
  // The vector `name` when config.json's boolean `flag` is true; otherwise refuses it (forbid) and
  // gives an empty vector: the optional biases (mamba_proj_bias, mamba_conv_bias).
  std::vector<float> flagged_vec(bool on, const char* flag, const std::string& name, const std::vector<int64_t>& shape) {
    if (on) return vec(name, shape);
    forbid(name, std::string("config.json has ") + flag + ": false");
    return {};
  }
  std::vector<float> opt_vec(const std::string& name, const std::vector<int64_t>& shape) {
    const TensorInfo* t = optional(name, shape);
    return t ? vec(*t) : std::vector<float>();
  }

  // LoadError naming the first tensor of the checkpoint that nothing bound.
  void check_all_used() const;

 private:
  const void* aligned(const TensorInfo& t);
  void scan(const TensorInfo& t) const;

  const Checkpoint& ck_;
  bool scan_values_;
  Model& m_;
  std::string root_;  // the family's top-level module ("model.", "backbone.")
  std::set<std::string> used_;
};

}  // namespace hl
