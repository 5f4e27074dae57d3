// Helpers of the DoRA / adapter tests: a small in-memory Model (no files; every Mat owns an fp32
// buffer) and a writer of PEFT adapter folders (adapter_config.json + adapter_model.safetensors).
// Not a checkpoint writer: test_util.h writes complete tiny checkpoints for the loader.
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/io/safetensors.h"
#include "engine/model/weights.h"
#include "test_util.h"

namespace hl::test {

// Deterministic uniform values in [-1, 1) (an LCG, so the numbers do not depend on the library).
struct Lcg {
  uint32_t s;
  explicit Lcg(uint32_t seed) : s(seed) {}
  double next() {
    s = s * 1664525u + 1013904223u;
    return (static_cast<double>(s >> 8) / 16777216.0) * 2.0 - 1.0;
  }
};

// A Mat over an owned fp32 buffer kept alive by the model.
inline Mat owned_mat(Model& m, const std::string& name, int64_t rows, int64_t cols, const std::vector<float>& v) {
  auto buf = std::make_shared<std::vector<float>>(v);
  buf->resize(static_cast<size_t>(rows * cols));
  m.keep_alive.push_back(buf);
  Mat x;
  x.dtype = DType::F32;
  x.data = buf->data();
  x.rows = rows;
  x.cols = cols;
  x.name = name;
  return x;
}

inline std::vector<float> random_values(int64_t n, uint32_t seed) {
  Lcg g(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(g.next());
  return v;
}

// Rows with exactly representable norms: Pythagorean triples (or pairs for 2 columns) scaled by powers
// of two, with alternating signs, placed at columns j, j+1, j+2 (mod cols).
inline std::vector<float> pythagorean_values(int64_t rows, int64_t cols) {
  static const int t3[][3] = {{1, 2, 2}, {2, 3, 6}, {1, 4, 8}, {2, 6, 9}, {4, 4, 7}};
  static const int t2[][2] = {{3, 4}, {5, 12}, {8, 15}};
  std::vector<float> v(static_cast<size_t>(rows * cols), 0.0f);
  for (int64_t j = 0; j < rows; ++j) {
    const float scale = std::ldexp(1.0f, static_cast<int>(j % 3) - 2) * (j % 2 ? -1.0f : 1.0f);
    const int len = cols >= 3 ? 3 : 2;
    for (int k = 0; k < len; ++k) {
      const int val = len == 3 ? t3[j % 5][k] : t2[j % 3][k];
      v[j * cols + (j + k) % cols] = scale * static_cast<float>(val);
    }
  }
  return v;
}

// Two layers: 0 = attention q (8,6) k (4,6) v (4,6) o (6,8) + dense MLP gate/up (10,6) down (6,10);
// 1 = Mamba in_proj (16,6) x_proj (6,8) dt_proj (8,2) + dt_bias (8,) out_proj (6,8) + MoE router (3,6)
// and 3 experts; lm_head (12,6). `fill(name, rows, cols)` gives each matrix's values.
using Fill = std::function<std::vector<float>(const std::string&, int64_t, int64_t)>;
inline std::shared_ptr<Model> mem_model(const Fill& fill) {
  auto m = std::make_shared<Model>();
  m->name = "mem";
  m->dir = "mem";
  auto mk = [&](const std::string& name, int64_t r, int64_t c) { return owned_mat(*m, name, r, c, fill(name, r, c)); };
  LayerParams params;
  params.ffn = {10, 3, 2};  // I, E, k
  m->schedule = LayerSchedule::from_lists({MixerKind::Attention, MixerKind::Mamba1}, {FfnKind::Dense, FfnKind::MoE}, params);
  m->w.layers.resize(2);
  LayerWeights& a = m->w.layers[0];
  a.attn.q = mk("model.layers.0.self_attn.q_proj.weight", 8, 6);
  a.attn.k = mk("model.layers.0.self_attn.k_proj.weight", 4, 6);
  a.attn.v = mk("model.layers.0.self_attn.v_proj.weight", 4, 6);
  a.attn.o = mk("model.layers.0.self_attn.o_proj.weight", 6, 8);
  a.mlp.gate = mk("model.layers.0.feed_forward.gate_proj.weight", 10, 6);
  a.mlp.up = mk("model.layers.0.feed_forward.up_proj.weight", 10, 6);
  a.mlp.down = mk("model.layers.0.feed_forward.down_proj.weight", 6, 10);
  LayerWeights& b = m->w.layers[1];
  b.mamba.in_proj = mk("model.layers.1.mamba.in_proj.weight", 16, 6);
  b.mamba.x_proj = mk("model.layers.1.mamba.x_proj.weight", 6, 8);
  b.mamba.dt_proj = mk("model.layers.1.mamba.dt_proj.weight", 8, 2);
  b.mamba.dt_bias = {0.5f, -0.25f, 1, 2, -1, 0, 0.125f, 3};
  b.mamba.out_proj = mk("model.layers.1.mamba.out_proj.weight", 6, 8);
  b.moe.router = mk("model.layers.1.feed_forward.router.weight", 3, 6);
  b.moe.experts.resize(3);
  for (int e = 0; e < 3; ++e) {
    const std::string p = "model.layers.1.feed_forward.experts." + std::to_string(e) + ".";
    b.moe.experts[e].gate = mk(p + "gate_proj.weight", 10, 6);
    b.moe.experts[e].up = mk(p + "up_proj.weight", 10, 6);
    b.moe.experts[e].down = mk(p + "down_proj.weight", 6, 10);
  }
  m->w.lm_head = mk("lm_head.weight", 12, 6);
  return m;
}

inline std::shared_ptr<Model> mem_model_random(uint32_t seed) {
  uint32_t k = seed;
  return mem_model([&](const std::string&, int64_t r, int64_t c) { return random_values(r * c, ++k * 7919u); });
}

inline std::vector<float> mat_values(const Mat& m) {
  std::vector<float> v(static_cast<size_t>(m.rows * m.cols));
  std::vector<uint8_t> plain;  // a Q4_K matrix in 16-row groups: its rows in ggml's layout
  to_float(m.dtype, plain_rows(m, 0, m.rows, plain), v.data(), v.size());
  return v;
}

// One adapter tensor: module path P (without "base_model.model."), suffix ("lora_A.weight", ...).
struct AdapterTensor {
  std::string module, suffix;
  std::vector<int64_t> shape;
  std::vector<float> values;
  DType dtype = DType::F32;
};

// Writes adapter_config.json (the json as given) and adapter_model.safetensors into dir.
inline void write_adapter(const std::string& dir, const nlohmann::json& config, const std::vector<AdapterTensor>& ts) {
  write_text(dir + "/adapter_config.json", config.dump(2));
  SafetensorsWriter w;
  for (const AdapterTensor& t : ts) {
    std::vector<float> v = t.values;
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    v.resize(static_cast<size_t>(n));
    const std::string name = "base_model.model." + t.module + "." + t.suffix;
    if (t.dtype == DType::I32) {
      std::vector<int32_t> iv(v.begin(), v.end());
      w.add(name, t.dtype, t.shape, iv.data(), iv.size() * 4);
    } else {
      w.add_float(name, t.dtype, t.shape, v.data());
    }
  }
  w.write(dir + "/adapter_model.safetensors");
}

inline nlohmann::json lora_config(int r, double alpha, bool dora) {
  return {{"peft_type", "LORA"},     {"task_type", "CAUSAL_LM"}, {"r", r},
          {"lora_alpha", alpha},     {"use_dora", dora},         {"use_rslora", false},
          {"fan_in_fan_out", false}, {"bias", "none"},           {"target_modules", nullptr}};
}

}  // namespace hl::test
