// adapter_model.safetensors of a PEFT LoRA / DoRA adapter (jamba-spec.md §5.3 names, §5.4 merge math:
// PEFT LoraLayer.get_delta_weight, DoraLinearVariant.merge_safe), checked against the base model and
// merged into it. Not adapter_config.json parsing (adapter_config.cpp), not ΔM/ΔD (probes/dora_probe.cpp).
// Untrusted input: every failure is a LoadError naming the file, the tensor and the expected shape.
#include "engine/io/adapter.h"
#include "engine/model/tensor_names.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include <unistd.h>

#include "engine/core/error.h"
#include "engine/core/sys_memory.h"
#include "engine/core/thread_pool.h"
#include "engine/io/json_util.h"
#include "engine/io/safetensors.h"
#include "engine/model/mixer_ops.h"

namespace hl {
namespace {

constexpr const char* kPrefix = "base_model.model.";
constexpr size_t kMaxModulePath = 256;

std::string tensor_name(const std::string& path, const char* suffix) {
  return kPrefix + path + suffix;
}

std::string where(const std::string& tensor) {
  return std::string(Adapter::kWeightsName) + ": tensor '" + tensor + "'";
}

bool valid_module_path(const std::string& p) {
  if (p.empty() || p.size() > kMaxModulePath || p.front() == '.' || p.back() == '.') return false;
  for (char c : p)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.'))
      return false;
  return true;
}

// Where the rank of a module comes from, for messages.
std::string rank_source(const AdapterConfig& c, const std::string& path) {
  for (const auto& [pattern, value] : c.rank_pattern)
    if (pattern.matches_suffix(path)) return "rank_pattern key '" + pattern.text() + "'";
  return "'r'";
}

struct Parts {
  const TensorInfo* A = nullptr;
  const TensorInfo* B = nullptr;
  const TensorInfo* bias = nullptr;
  const TensorInfo* mag = nullptr;
};

std::vector<float> widen_checked(const TensorInfo& t) {  // dtype checked in read_adapter
  std::vector<float> v(static_cast<size_t>(t.numel()));
  to_float(t.dtype, t.data, v.data(), v.size());
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]))
      throw LoadError(where(t.name) + ": element " + std::to_string(i) + " is " +
                      (std::isnan(v[i]) ? "NaN" : "infinite") + "; adapter values must be finite");
  return v;
}

void expect_shape(const TensorInfo& t, const std::vector<int64_t>& want, const std::string& why) {
  if (t.shape != want)
    throw LoadError(where(t.name) + ": shape " + shape_to_string(t.shape) + ", expected " + shape_to_string(want) +
                    (why.empty() ? "" : " (" + why + ")"));
}

AdapterModule build_module(const std::string& path, const Parts& p, const AdapterConfig& c) {
  const char* kA = ".lora_A.weight";
  const char* kB = ".lora_B.weight";
  if (!p.A || !p.B) {
    const TensorInfo* present = p.A ? p.A : p.B ? p.B : p.mag ? p.mag : p.bias;
    throw LoadError(std::string(Adapter::kWeightsName) + ": module '" + path + "': tensor '" +
                    tensor_name(path, p.A ? kB : kA) + "' is missing (found '" + present->name +
                    "'; every adapted module needs lora_A.weight and lora_B.weight)");
  }
  AdapterModule m;
  m.path = path;
  m.rank = c.rank_for(path);
  m.alpha = c.alpha_for(path);
  m.scaling = c.scaling_for(path);
  if (p.A->shape.size() != 2)
    throw LoadError(where(p.A->name) + ": shape " + shape_to_string(p.A->shape) + ", expected (r, in)");
  if (p.B->shape.size() != 2)
    throw LoadError(where(p.B->name) + ": shape " + shape_to_string(p.B->shape) + ", expected (out, r)");
  const std::string rank_why = "rank " + std::to_string(m.rank) + " from adapter_config.json " + rank_source(c, path);
  m.cols = p.A->shape[1];
  m.rows = p.B->shape[0];
  expect_shape(*p.A, {m.rank, m.cols}, "(r, in), " + rank_why);
  expect_shape(*p.B, {m.rows, m.rank}, "(out, r), " + rank_why);
  if (m.rows < 1 || m.cols < 1) {
    const TensorInfo& empty = m.cols < 1 ? *p.A : *p.B;
    throw LoadError(where(empty.name) + ": shape " + shape_to_string(empty.shape) + " is empty");
  }
  if (p.bias) {
    if (!c.lora_bias)
      throw LoadError(where(p.bias->name) +
                      ": a lora_B bias in an adapter whose adapter_config.json has lora_bias false");
    expect_shape(*p.bias, {m.rows}, "(out,) of lora_B.weight");
  }
  if (c.use_dora && !p.mag)
    throw LoadError(std::string(Adapter::kWeightsName) + ": module '" + path + "': tensor '" +
                    tensor_name(path, ".lora_magnitude_vector") +
                    "' is missing (adapter_config.json has use_dora true)");
  if (p.mag) {
    if (!c.use_dora)
      throw LoadError(where(p.mag->name) +
                      ": a DoRA magnitude in an adapter whose adapter_config.json has use_dora false");
    expect_shape(*p.mag, {m.rows}, "(out,) of lora_B.weight");
  }
  if (!c.targets(path))
    throw LoadError(
        where(p.A->name) + ": module '" + path +
        "' is not selected by adapter_config.json (target_modules / exclude_modules / layers_to_transform)");
  m.A = widen_checked(*p.A);
  m.B = widen_checked(*p.B);
  if (p.bias) m.B_bias = widen_checked(*p.bias);
  if (p.mag) m.magnitude = widen_checked(*p.mag);
  return m;
}

// The modules of adapter_model.safetensors (already validated as a file), checked against a.config.
Adapter adapter_from(Adapter a, const SafetensorsFile& file) {
  std::map<std::string, Parts> parts;  // by module path
  struct Suffix {
    const char* text;
    const TensorInfo* Parts::*slot;
  };
  const Suffix suffixes[] = {{".lora_A.weight", &Parts::A},
                             {".lora_B.weight", &Parts::B},
                             {".lora_B.bias", &Parts::bias},
                             {".lora_magnitude_vector.weight", &Parts::mag},
                             {".lora_magnitude_vector", &Parts::mag}};
  for (const TensorInfo& t : file.tensors()) {
    const std::string& name = t.name;
    if (name.rfind(kPrefix, 0) != 0)
      throw LoadError(where(name) + ": name does not start with '" + kPrefix + "' (not a PEFT LoRA tensor)");
    const std::string rest = name.substr(std::char_traits<char>::length(kPrefix));
    const Suffix* hit = nullptr;
    for (const Suffix& s : suffixes) {
      const size_t n = std::char_traits<char>::length(s.text);
      if (rest.size() > n && rest.compare(rest.size() - n, n, s.text) == 0) {
        hit = &s;
        break;
      }
    }
    if (!hit) {
      std::string why =
          "unexpected tensor (expected base_model.model.{module}.lora_A.weight, lora_B.weight, "
          "lora_B.bias or lora_magnitude_vector)";
      if (rest.find("lora_embedding_") != std::string::npos)
        why = "LoRA on embeddings is not supported";
      else if (rest.find(".lora_A.") != std::string::npos || rest.find(".lora_B.") != std::string::npos ||
               rest.find(".lora_magnitude_vector.") != std::string::npos)
        why = "the key carries an adapter name (in-memory layout); PEFT's saved layout has none";
      throw LoadError(where(name) + ": " + why);
    }
    const std::string path = rest.substr(0, rest.size() - std::char_traits<char>::length(hit->text));
    if (!valid_module_path(path))
      throw LoadError(where(name) + ": module path must be 1 to " + std::to_string(kMaxModulePath) +
                      " characters of [A-Za-z0-9_.]");
    if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16)
      throw LoadError(where(name) + ": dtype " + dtype_name(t.dtype) + ", expected F32, F16 or BF16");
    const TensorInfo*& slot = parts[path].*(hit->slot);
    if (slot) throw LoadError(where(name) + ": module '" + path + "' already has '" + slot->name + "'");
    slot = &t;
  }
  if (parts.empty()) throw LoadError(std::string(Adapter::kWeightsName) + ": holds no LoRA tensors");
  const auto start = std::chrono::steady_clock::now();
  for (const auto& [path, p] : parts) {
    a.modules.push_back(build_module(path, p, a.config));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (seconds > AdapterConfig::kMaxMatchSeconds)
      throw LoadError(std::string(Adapter::kConfigName) + ": matching rank_pattern / alpha_pattern / target_modules " +
                      "against the module names took more than " +
                      std::to_string(int(AdapterConfig::kMaxMatchSeconds)) +
                      " s; use plain module names or simpler regular expressions");
  }
  return a;
}

}  // namespace

const AdapterModule* Adapter::find(const std::string& path) const {
  auto it = std::lower_bound(modules.begin(), modules.end(), path,
                             [](const AdapterModule& m, const std::string& p) { return m.path < p; });
  return it != modules.end() && it->path == path ? &*it : nullptr;
}

std::vector<LinearModule> linear_modules(const Model& m, bool include_lm_head) {
  std::vector<LinearModule> out;
  for (size_t i = 0; i < m.w.layers.size(); ++i) {
    const LayerWeights& L = m.w.layers[i];
    const std::string prefix = "model.layers." + std::to_string(i) + ".";
    auto add = [&](const std::string& jamba_module, const Mat& mat, const std::vector<float>* bias) {
      if (mat.empty()) return;
      // The module as the family's HF model names it (Nemotron-H: "mixer.in_proj", tensor_names.h).
      std::string path = family_tensor_name(m.config, "model.", prefix + jamba_module + ".weight");
      path.resize(path.size() - 7);  // without ".weight"
      out.push_back({static_cast<int>(i), path.substr(prefix.size()), path, &mat, bias && !bias->empty() ? bias : nullptr});
    };
    mixer_ops(m.schedule[static_cast<int64_t>(i)].mixer).each_matrix(L, add);  // model/mixer_<kind>.cpp
    if (m.schedule[static_cast<int64_t>(i)].is_moe()) {
      add("feed_forward.router", L.moe.router, nullptr);
      for (size_t e = 0; e < L.moe.experts.size(); ++e) {
        const std::string ex = "feed_forward.experts." + std::to_string(e) + ".";
        add(ex + "gate_proj", L.moe.experts[e].gate, nullptr);
        add(ex + "up_proj", L.moe.experts[e].up, nullptr);
        add(ex + "down_proj", L.moe.experts[e].down, nullptr);
      }
    } else {
      add("feed_forward.gate_proj", L.mlp.gate, &L.mlp.gate_bias);
      add("feed_forward.up_proj", L.mlp.up, &L.mlp.up_bias);
      add("feed_forward.down_proj", L.mlp.down, &L.mlp.down_bias);
    }
  }
  if (include_lm_head && !m.w.lm_head.empty()) out.push_back({-1, "lm_head", "lm_head", &m.w.lm_head, nullptr});
  return out;
}

Adapter read_adapter(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw LoadError(dir + ": adapter folder not found or not a folder");
  const std::string cfg_path = (fs::path(dir) / Adapter::kConfigName).string();
  if (!fs::exists(cfg_path, ec))
    throw LoadError(dir + ": " + Adapter::kConfigName + " is missing (not a PEFT adapter folder)");
  Adapter a;
  a.dir = dir;
  a.config = parse_adapter_config(read_file_limited(cfg_path, AdapterConfig::kMaxBytes, Adapter::kConfigName),
                                  Adapter::kConfigName);

  const std::string st_path = (fs::path(dir) / Adapter::kWeightsName).string();
  if (!fs::exists(st_path, ec)) {
    if (fs::exists(fs::path(dir) / "adapter_model.bin", ec))
      throw LoadError(dir +
                      ": only adapter_model.bin (a pickle) is present; it is not read, save the adapter with "
                      "safe_serialization=True to get adapter_model.safetensors");
    throw LoadError(dir + ": " + Adapter::kWeightsName + " is missing");
  }
  return adapter_from(std::move(a), SafetensorsFile::open(st_path));
}

Adapter parse_adapter(const std::string& config_text, const uint8_t* weights, uint64_t size, const std::string& dir) {
  if (config_text.size() > AdapterConfig::kMaxBytes)
    throw LoadError(dir + ": " + Adapter::kConfigName + " is " + std::to_string(config_text.size()) +
                    " bytes, allowed at most " + std::to_string(AdapterConfig::kMaxBytes));
  Adapter a;
  a.dir = dir;
  a.config = parse_adapter_config(config_text, Adapter::kConfigName);
  return adapter_from(std::move(a), SafetensorsFile::parse(weights, size, Adapter::kWeightsName));
}


void check_adapter(const Adapter& a, const Model& base) {
  std::map<std::string, const LinearModule*> by_path;
  const std::vector<LinearModule> mods = linear_modules(base, true);
  for (const LinearModule& lm : mods) by_path[lm.path] = &lm;
  const std::string model = base.dir.empty() ? std::string("the base model") : "the base model " + base.dir;
  for (const AdapterModule& m : a.modules) {
    auto it = by_path.find(m.path);
    if (it == by_path.end())
      throw LoadError(where(tensor_name(m.path, ".lora_A.weight")) + ": module '" + m.path +
                      "' is not a linear module of " + model +
                      " (expected names such as 'model.layers.0.mamba.in_proj' or 'model.layers.1.self_attn.q_proj')");
    const Mat& w = *it->second->mat;
    const std::string base_w =
        "base weight '" + m.path + ".weight' is " + shape_to_string({w.rows, w.cols}) + " (out, in)";
    if (m.rows != w.rows)
      throw LoadError(where(tensor_name(m.path, ".lora_B.weight")) + ": shape " + shape_to_string({m.rows, m.rank}) +
                      ", expected " + shape_to_string({w.rows, m.rank}) + ": " + base_w);
    if (m.cols != w.cols)
      throw LoadError(where(tensor_name(m.path, ".lora_A.weight")) + ": shape " + shape_to_string({m.rank, m.cols}) +
                      ", expected " + shape_to_string({m.rank, w.cols}) + ": " + base_w);
    if (!m.B_bias.empty() && !it->second->bias)
      throw LoadError(where(tensor_name(m.path, ".lora_B.bias")) + ": module '" + m.path +
                      "' of the base model has no bias to merge it into");
  }
}

Adapter load_adapter(const std::string& dir, const Model& base) {
  Adapter a = read_adapter(dir);
  check_adapter(a, base);
  return a;
}

void mat_row_to_double(const Mat& m, int64_t j, double* out) {
  thread_local std::vector<uint8_t> plain;
  const uint8_t* p = plain_rows(m, j, 1, plain);
  switch (m.dtype) {
    case DType::F32: {
      for (int64_t c = 0; c < m.cols; ++c) {
        float f;
        std::memcpy(&f, p + 4 * c, 4);
        out[c] = f;
      }
      return;
    }
    case DType::BF16:
    case DType::F16: {
      for (int64_t c = 0; c < m.cols; ++c) {
        uint16_t h;
        std::memcpy(&h, p + 2 * c, 2);
        out[c] = m.dtype == DType::BF16 ? bf16_to_float(h) : f16_to_float(h);
      }
      return;
    }
    default: {
      std::vector<float> tmp(static_cast<size_t>(m.cols));
      to_float(m.dtype, p, tmp.data(), tmp.size());
      for (int64_t c = 0; c < m.cols; ++c) out[c] = tmp[c];
    }
  }
}

bool adapted_row(const AdapterModule& a, const double* w0_row, int64_t j, double* out) {
  const int64_t in = a.cols;
  const float* Bj = a.B.data() + j * a.rank;  // (r,) row j of lora_B
  std::fill(out, out + in, 0.0);
  for (int64_t k = 0; k < a.rank; ++k) {  // (B·A)_j = Σ_k B[j,k] · A[k,:]
    const double b = Bj[k];
    if (b == 0.0) continue;
    const float* Ak = a.A.data() + k * in;  // (in,)
    for (int64_t c = 0; c < in; ++c) out[c] += b * Ak[c];
  }
  for (int64_t c = 0; c < in; ++c) out[c] = w0_row[c] + a.scaling * out[c];  // V_j = W0_j + s·(B·A)_j
  if (!a.is_dora()) return true;
  double sq = 0;
  for (int64_t c = 0; c < in; ++c) sq += out[c] * out[c];
  if (sq == 0.0) return false;
  const double factor = a.magnitude[j] / std::sqrt(sq);  // m_j / ‖V_j‖
  for (int64_t c = 0; c < in; ++c) out[c] *= factor;
  return true;
}

void merge_adapter(Model& m, const Adapter& a, uint64_t memory_budget_bytes) {
  if (!m.adapter.empty())
    throw Error("model '" + m.name + "' already has the adapter " + m.adapter +
                " merged; reload the base model to apply another");
  check_adapter(a, m);
  // Resource estimate before the first allocation (reliability-checklist.md).
  uint64_t need = 0;
  for (const AdapterModule& am : a.modules) need += static_cast<uint64_t>(am.rows) * am.cols * sizeof(float);
  const AvailableMemory avail = memory_budget_bytes ? AvailableMemory{} : available_memory();
  const uint64_t budget = memory_budget_bytes ? memory_budget_bytes : avail.bytes;
  if (need > budget)
    throw LoadError(a.dir + ": merging needs " + std::to_string(need) + " bytes of fp32 weights, more than the " +
                    (memory_budget_bytes ? "memory budget of " + std::to_string(budget) + " bytes"
                                         : std::to_string(budget) + " bytes available (" + avail.source + ")"));
  std::map<std::string, LinearModule> by_path;
  for (const LinearModule& lm : linear_modules(m, true)) by_path[lm.path] = lm;

  struct Pending {
    Mat* mat;
    std::vector<float>* bias;
    std::shared_ptr<std::vector<float>> merged;  // (out, in)
    std::vector<float> new_bias;                 // (out,) or empty
  };
  std::vector<Pending> pending;
  pending.reserve(a.modules.size());
  for (const AdapterModule& am : a.modules) {
    const LinearModule& lm = by_path.at(am.path);
    // The Model is ours to change (non-const m); linear_modules hands out const views of it.
    Pending p{const_cast<Mat*>(lm.mat),
              const_cast<std::vector<float>*>(lm.bias),
              std::make_shared<std::vector<float>>(static_cast<size_t>(am.rows * am.cols)),
              {}};
    std::vector<uint8_t> status(static_cast<size_t>(am.rows), 0);  // 1: zero DoRA norm, 2: non-finite
    const Mat& w0 = *p.mat;
    float* dst = p.merged->data();
    ThreadPool::global().parallel_for(am.rows, 16, [&](int64_t begin, int64_t end) {
      std::vector<double> w0_row(static_cast<size_t>(am.cols)), row(static_cast<size_t>(am.cols));
      for (int64_t j = begin; j < end; ++j) {
        mat_row_to_double(w0, j, w0_row.data());
        if (!adapted_row(am, w0_row.data(), j, row.data())) status[j] = 1;
        float* out = dst + j * am.cols;
        for (int64_t c = 0; c < am.cols; ++c) {
          out[c] = static_cast<float>(row[c]);
          if (!std::isfinite(out[c]) && status[j] == 0) status[j] = 2;
        }
      }
    });
    for (int64_t j = 0; j < am.rows; ++j) {
      if (status[j] == 1)
        throw LoadError(std::string(Adapter::kWeightsName) + ": module '" + am.path + "': row " + std::to_string(j) +
                        " of W0 + s·B·A has norm 0, so the DoRA magnitude cannot be applied");
      if (status[j] == 2)
        throw LoadError(std::string(Adapter::kWeightsName) + ": module '" + am.path + "': merged weight row " +
                        std::to_string(j) + " is not finite in fp32");
    }
    if (!am.B_bias.empty()) {
      p.new_bias = *p.bias;  // DoRA does not rescale the bias (jamba-spec.md §5.4)
      for (int64_t o = 0; o < am.rows; ++o)
        p.new_bias[o] = static_cast<float>(p.new_bias[o] + am.scaling * static_cast<double>(am.B_bias[o]));
    }
    pending.push_back(std::move(p));
  }
  // Commit: nothing above changed the model.
  for (Pending& p : pending) {
    p.mat->data = p.merged->data();
    p.mat->dtype = DType::F32;
    m.keep_alive.push_back(p.merged);
    if (!p.new_bias.empty()) *p.bias = std::move(p.new_bias);
  }
  m.adapter = a.dir;
}

}  // namespace hl
