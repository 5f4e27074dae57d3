// Binds a validated checkpoint to ModelWeights: every tensor by name with its shape derived from
// config.json (jamba-spec.md §2.1), per-expert or fused v5 expert names (§2.2), tied embeddings, the
// HybridLens extensions (trace-format.md §1). Memory budget checked before binding. Not the file checks: io/.
#include "engine/model/loader.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <set>

#include "engine/core/error.h"
#include "engine/core/sys_memory.h"

namespace hl {
namespace {

std::string format_bytes(uint64_t b) {
  char buf[64];
  if (b >= (uint64_t{1} << 30))
    std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(b) / (1 << 30));
  else if (b >= (uint64_t{1} << 20))
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(b) / (1 << 20));
  else if (b >= 1024)
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(b) / 1024);
  else
    std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(b));
  return buf;
}

// Bytes of the float copies that binding makes (norms, biases, conv, A, D, registers, mean row):
// known from the config alone, so the budget check can run before anything is allocated.
uint64_t widened_bytes(const JambaConfig& c, const LayerSchedule& sched) {
  const uint64_t H = c.hidden_size, Di = c.mamba_inner(), N = c.mamba_d_state, W = c.mamba_d_conv;
  const uint64_t R = c.mamba_dt_rank, nh = c.num_attention_heads;
  uint64_t floats = H /* final norm */ + H /* mean embedding */ + c.num_register_tokens * H;
  for (const LayerSpec& l : sched.layers()) {
    floats += 2 * H;
    if (l.has_attention()) {
      floats += nh;
    } else {
      floats += Di * W + R + 2 * N + Di /* dt bias */ + Di * N + Di;
      if (c.mamba_conv_bias) floats += Di;
      if (c.mamba_proj_bias) floats += 2 * Di + H;
    }
  }
  return floats * sizeof(float);
}

bool is_float_dtype(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16;
}

// Index of the first NaN/Inf element, or -1.
int64_t first_nonfinite(DType t, const void* data, int64_t n, bool* is_nan) {
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

class Binder {
 public:
  Binder(const Checkpoint& ck, const LoadOptions& o, Model& m) : ck_(ck), opts_(o), m_(m) {}

  const TensorInfo* optional(const std::string& name, const std::vector<int64_t>& shape) {
    const TensorInfo* t = ck_.find(name);
    if (!t) return nullptr;
    used_.insert(name);
    if (t->shape != shape) {
      throw LoadError(base_name(t->file) + ": tensor '" + name + "': shape " + shape_to_string(t->shape) +
                      ", expected " + shape_to_string(shape) + " from config.json");
    }
    if (!is_float_dtype(t->dtype)) {
      throw LoadError(base_name(t->file) + ": tensor '" + name + "': dtype " + dtype_name(t->dtype) +
                      ", expected F32, F16 or BF16");
    }
    if (opts_.scan_values) scan(*t);
    return t;
  }
  const TensorInfo& need(const std::string& name, const std::vector<int64_t>& shape) {
    const TensorInfo* t = optional(name, shape);
    if (!t) {
      throw LoadError(m_.name + ": missing tensor '" + name + "' with shape " + shape_to_string(shape) +
                      " (expected from config.json)");
    }
    return *t;
  }
  // A tensor the config says must not exist (e.g. a bias with mamba_proj_bias false).
  void forbid(const std::string& name, const std::string& why) {
    if (const TensorInfo* t = ck_.find(name)) {
      throw LoadError(base_name(t->file) + ": tensor '" + name + "' is present, but " + why);
    }
  }
  bool has(const std::string& name) const { return ck_.find(name) != nullptr; }

  Mat mat(const TensorInfo& t, const std::string& name) {
    Mat m;
    m.dtype = t.dtype;
    m.data = aligned(t);
    m.rows = t.shape.empty() ? 1 : t.shape[0];
    m.cols = t.shape.empty() ? 1 : t.numel() / (m.rows > 0 ? m.rows : 1);
    m.name = name;
    return m;
  }
  Mat mat(const std::string& name, int64_t rows, int64_t cols) { return mat(need(name, {rows, cols}), name); }
  // A (rows, cols) view starting at element `first` of a tensor (one expert of a fused tensor).
  Mat view(const TensorInfo& t, int64_t first, int64_t rows, int64_t cols, const std::string& name) {
    Mat m;
    m.dtype = t.dtype;
    m.data = static_cast<const uint8_t*>(aligned(t)) + first * dtype_size(t.dtype);
    m.rows = rows;
    m.cols = cols;
    m.name = name;
    return m;
  }
  std::vector<float> vec(const TensorInfo& t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    if (reinterpret_cast<uintptr_t>(t.data) % static_cast<uintptr_t>(dtype_size(t.dtype)) == 0) {
      to_float(t.dtype, t.data, v.data(), v.size());
    } else {  // to_float loads whole elements: give it an aligned copy
      std::vector<uint64_t> tmp((t.nbytes() + 7) / 8);
      std::memcpy(tmp.data(), t.data, t.nbytes());
      to_float(t.dtype, tmp.data(), v.data(), v.size());
    }
    return v;
  }
  std::vector<float> vec(const std::string& name, const std::vector<int64_t>& shape) { return vec(need(name, shape)); }
  std::vector<float> opt_vec(const std::string& name, const std::vector<int64_t>& shape) {
    const TensorInfo* t = optional(name, shape);
    return t ? vec(*t) : std::vector<float>();
  }

  void check_all_used() const {
    for (const TensorInfo* t : ck_.all_tensors()) {
      if (!used_.count(t->name)) {
        throw LoadError(
            base_name(t->file) + ": unexpected tensor '" + t->name + "' " + shape_to_string(t->shape) +
            ": not part of a Jamba model with this config.json (misspelt name, or a layer of another kind?)");
      }
    }
  }

 private:
  // The tensor's data, copied into an owned buffer when the file leaves it misaligned for its dtype.
  const void* aligned(const TensorInfo& t) {
    if (reinterpret_cast<uintptr_t>(t.data) % static_cast<uintptr_t>(dtype_size(t.dtype)) == 0) return t.data;
    auto buf = std::make_shared<std::vector<uint64_t>>((t.nbytes() + 7) / 8);
    std::memcpy(buf->data(), t.data, t.nbytes());
    m_.keep_alive.push_back(buf);
    return buf->data();
  }
  void scan(const TensorInfo& t) const {
    bool is_nan = false;
    int64_t i = first_nonfinite(t.dtype, t.data, t.numel(), &is_nan);
    if (i >= 0) {
      throw LoadError(base_name(t.file) + ": tensor '" + t.name + "': element " + std::to_string(i) + " at " +
                      unravel(t.shape, i) + " is " + (is_nan ? "NaN" : "Inf") + " (value scan)");
    }
  }

  const Checkpoint& ck_;
  const LoadOptions& opts_;
  Model& m_;
  std::set<std::string> used_;
};

void bind_mamba(Binder& b, const JambaConfig& c, const std::string& p, MambaWeights& w) {
  const int64_t H = c.hidden_size, Di = c.mamba_inner(), N = c.mamba_d_state, W = c.mamba_d_conv, R = c.mamba_dt_rank;
  w.in_proj = b.mat(p + "in_proj.weight", 2 * Di, H);  // (2*Di, H)
  if (c.mamba_proj_bias) {
    w.in_bias = b.vec(p + "in_proj.bias", {2 * Di});  // (2*Di,)
    w.out_bias = b.vec(p + "out_proj.bias", {H});     // (H,)
  } else {
    b.forbid(p + "in_proj.bias", "config.json has mamba_proj_bias: false");
    b.forbid(p + "out_proj.bias", "config.json has mamba_proj_bias: false");
  }
  w.conv_w = b.vec(p + "conv1d.weight", {Di, 1, W});  // (Di, 1, W) → (Di, W)
  if (c.mamba_conv_bias)
    w.conv_b = b.vec(p + "conv1d.bias", {Di});
  else
    b.forbid(p + "conv1d.bias", "config.json has mamba_conv_bias: false");
  w.x_proj = b.mat(p + "x_proj.weight", R + 2 * N, Di);  // (R + 2N, Di)
  w.dt_norm = b.vec(p + "dt_layernorm.weight", {R});
  w.b_norm = b.vec(p + "b_layernorm.weight", {N});
  w.c_norm = b.vec(p + "c_layernorm.weight", {N});
  w.dt_proj = b.mat(p + "dt_proj.weight", Di, R);  // (Di, R)
  w.dt_bias = b.vec(p + "dt_proj.bias", {Di});
  w.A = b.vec(p + "A_log", {Di, N});      // (Di, N)
  for (float& a : w.A) a = -std::exp(a);  // A = -exp(A_log), fp32
  w.D = b.vec(p + "D", {Di});
  w.out_proj = b.mat(p + "out_proj.weight", H, Di);  // (H, Di)
}

void bind_moe(Binder& b, const JambaConfig& c, const std::string& p, MoeWeights& w) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, E = c.num_experts;
  w.router = b.mat(p + "router.weight", E, H);  // (E, H)
  w.experts.resize(static_cast<size_t>(E));
  if (b.has(p + "experts.gate_up_proj") || b.has(p + "experts.down_proj")) {
    // transformers v5 fused layout: gate_up (E, 2I, H) rows [0,I) gate, [I,2I) up; down (E, H, I).
    const TensorInfo& gu = b.need(p + "experts.gate_up_proj", {E, 2 * I, H});
    const TensorInfo& dn = b.need(p + "experts.down_proj", {E, H, I});
    for (int64_t e = 0; e < E; ++e) {
      std::string q = p + "experts." + std::to_string(e) + ".";
      MlpWeights& x = w.experts[static_cast<size_t>(e)];
      x.gate = b.view(gu, e * 2 * I * H, I, H, q + "gate_proj.weight");    // (I, H)
      x.up = b.view(gu, (e * 2 * I + I) * H, I, H, q + "up_proj.weight");  // (I, H)
      x.down = b.view(dn, e * H * I, H, I, q + "down_proj.weight");        // (H, I)
    }
    return;
  }
  for (int64_t e = 0; e < E; ++e) {
    std::string q = p + "experts." + std::to_string(e) + ".";
    MlpWeights& x = w.experts[static_cast<size_t>(e)];
    x.gate = b.mat(q + "gate_proj.weight", I, H);
    x.up = b.mat(q + "up_proj.weight", I, H);
    x.down = b.mat(q + "down_proj.weight", H, I);
  }
}

// The mean row of the embedding (test-time registers), accumulated in float64.
std::vector<float> mean_row(const Mat& m) {
  std::vector<double> acc(static_cast<size_t>(m.cols), 0.0);
  std::vector<float> row(static_cast<size_t>(m.cols));
  for (int64_t r = 0; r < m.rows; ++r) {
    to_float(m.dtype, m.row_ptr(r), row.data(), row.size());
    for (size_t j = 0; j < row.size(); ++j) acc[j] += row[j];
  }
  std::vector<float> out(acc.size());
  for (size_t j = 0; j < acc.size(); ++j) out[j] = m.rows > 0 ? static_cast<float>(acc[j] / m.rows) : 0.0f;
  return out;
}

}  // namespace

std::shared_ptr<Model> bind_model(const Checkpoint& ck, const LoadOptions& opts) {
  const JambaConfig& c = ck.config();
  auto model = std::make_shared<Model>();
  Model& m = *model;
  m.dir = ck.dir();
  m.name = base_name(ck.dir());
  m.config_sha256 = ck.config_sha256();
  m.tokenizer_path = ck.tokenizer_path();
  m.config = c;
  m.schedule = LayerSchedule::from_config(c);

  // Resource estimate before the first allocation (reliability-checklist.md).
  const uint64_t tensors = ck.total_tensor_bytes(), widened = widened_bytes(c, m.schedule);
  const AvailableMemory avail = opts.memory_budget_bytes ? AvailableMemory{} : available_memory();
  const uint64_t budget = opts.memory_budget_bytes ? opts.memory_budget_bytes : avail.bytes;
  if (tensors + widened > budget) {
    throw LoadError(m.name + ": the model needs " + format_bytes(tensors + widened) + " (" + format_bytes(tensors) +
                    " of tensors + " + format_bytes(widened) + " of widened vectors), more than the memory budget of " +
                    format_bytes(budget) +
                    (opts.memory_budget_bytes ? " (--memory-budget)" : " (" + avail.source + ")"));
  }
  ck.read_data();  // FileAccess::Read: the weights arrive only now, after the budget check
  m.files = ck.stamps();
  for (const auto& map : ck.mappings()) m.keep_alive.push_back(map);

  Binder b(ck, opts, m);
  const int64_t H = c.hidden_size, V = c.vocab_size, hd = c.head_dim();
  const int64_t nh = c.num_attention_heads, nkv = c.num_key_value_heads, I = c.intermediate_size;
  ModelWeights& w = m.w;
  w.embed = b.mat("model.embed_tokens.weight", V, H);  // (V, H)
  if (c.tie_word_embeddings) {
    b.optional("lm_head.weight", {V, H});  // HF ties it to the embedding anyway
    w.lm_head = w.embed;
  } else {
    if (!b.has("lm_head.weight")) {
      throw LoadError(m.name + ": missing tensor 'lm_head.weight' with shape " + shape_to_string({V, H}) +
                      " (config.json has tie_word_embeddings: false)");
    }
    w.lm_head = b.mat("lm_head.weight", V, H);
  }
  w.final_norm = b.vec("model.final_layernorm.weight", {H});
  const int64_t R = c.num_register_tokens;
  if (R > 0)
    w.register_rows = b.vec("model.register_tokens", {R, H});  // (R, H)
  else
    b.forbid("model.register_tokens", "config.json has no num_register_tokens (or 0)");

  const int64_t L = c.num_hidden_layers;
  w.layers.resize(static_cast<size_t>(L));
  for (int64_t i = 0; i < L; ++i) {
    if (opts.progress.callback && !opts.progress.callback(i, L, "binding layer " + std::to_string(i)))
      throw Cancelled();
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights& lw = w.layers[static_cast<size_t>(i)];
    lw.input_norm = b.vec(p + "input_layernorm.weight", {H});
    lw.pre_ff_norm = b.vec(p + "pre_ff_layernorm.weight", {H});
    if (m.schedule[i].has_attention()) {
      lw.attn.q = b.mat(p + "self_attn.q_proj.weight", nh * hd, H);   // (nh*hd, H)
      lw.attn.k = b.mat(p + "self_attn.k_proj.weight", nkv * hd, H);  // (nkv*hd, H)
      lw.attn.v = b.mat(p + "self_attn.v_proj.weight", nkv * hd, H);  // (nkv*hd, H)
      lw.attn.o = b.mat(p + "self_attn.o_proj.weight", H, nh * hd);   // (H, nh*hd)
      lw.attn.sinks = b.opt_vec(p + "self_attn.sinks", {nh});         // (nh,)
    } else {
      bind_mamba(b, c, p + "mamba.", lw.mamba);
    }
    if (m.schedule[i].is_moe()) {
      bind_moe(b, c, p + "feed_forward.", lw.moe);
    } else {
      lw.mlp.gate = b.mat(p + "feed_forward.gate_proj.weight", I, H);  // (I, H)
      lw.mlp.up = b.mat(p + "feed_forward.up_proj.weight", I, H);      // (I, H)
      lw.mlp.down = b.mat(p + "feed_forward.down_proj.weight", H, I);  // (H, I)
    }
  }
  b.check_all_used();
  w.mean_embedding = mean_row(w.embed);  // (H,)
  if (opts.progress.callback && !opts.progress.callback(L, L, "bound")) throw Cancelled();
  return model;
}

std::shared_ptr<Model> load_model(const std::string& dir, const LoadOptions& opts) {
  // Read, not Map: a run must not depend on the file after load (MappedFile::open_read).
  auto ck = std::make_shared<Checkpoint>(Checkpoint::open(dir, opts.progress, FileAccess::Read));
  std::shared_ptr<Model> m = bind_model(*ck, opts);
  m->keep_alive.push_back(ck);
  return m;
}

}  // namespace hl
