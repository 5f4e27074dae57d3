// Shared helpers for engine tests: temporary folders, a tiny valid Jamba config and a writer of
// complete tiny checkpoints (every tensor of jamba-spec.md §2.1, deterministic values), and a check
// that a statement throws LoadError with a given message part. Not a model generator: see tools/.
#pragma once
#include <errno.h>  // program_invocation_short_name
#include <ftw.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/io/config.h"
#include "engine/model/layer_schedule.h"
#include "engine/io/safetensors.h"

// 1 where a sanitizer owns the allocator (ASan, MSan: it ignores mallopt and pairs every allocation
// function with its own deallocation), else 0.
#if defined(__SANITIZE_ADDRESS__)
#define HL_SANITIZED_ALLOCATOR 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer)
#define HL_SANITIZED_ALLOCATOR 1
#endif
#endif
#ifndef HL_SANITIZED_ALLOCATOR
#define HL_SANITIZED_ALLOCATOR 0
#endif

namespace hl::test {

// A fresh folder under $TMPDIR (or /tmp) named PREFIX_XXXXXX; the caller removes it (or use
// TempDir, or process_scratch).
inline std::string make_temp_dir(const std::string& prefix = "hl_test") {
  const char* base = std::getenv("TMPDIR");
  std::string t = std::string(base && *base ? base : "/tmp") + "/" + prefix + "_XXXXXX";
  std::vector<char> buf(t.begin(), t.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
  return buf.data();
}

inline void remove_tree(const std::string& path) {
  ::nftw(
      path.c_str(), [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); }, 16,
      FTW_DEPTH | FTW_PHYS);
}

// A temporary folder removed with everything in it when the object goes away.
struct TempDir {
  std::string path = make_temp_dir();
  TempDir() = default;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() { remove_tree(path); }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

// One folder for the whole test process (ctest runs each test in a process of its own), named after
// the test binary and made on first use; removed with everything in it when the process ends, unless
// a test failed: then it stays and its path is printed, so the files a failure left can be read.
// Only the process that made it removes it (a forked child that exits normally runs the same static
// destructors).
inline const std::string& process_scratch() {
  struct Scratch {
    std::string path;
    pid_t owner;
    explicit Scratch(const std::string& p) : path(make_temp_dir(p)), owner(::getpid()) {}
    ~Scratch() {
      if (::getpid() != owner) return;
      if (::testing::UnitTest::GetInstance()->Failed()) {
        std::fprintf(stderr, "test files kept in %s\n", path.c_str());
        return;
      }
      remove_tree(path);
    }
  };
  static const Scratch scratch(program_invocation_short_name);  // glibc: the binary's file name
  return scratch.path;
}

// The whole file; empty when it cannot be read.
inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// Tiny but complete: layer 0 Mamba+dense, 1 attention+MoE, 2 Mamba+dense, 3 Mamba+MoE.
// H=16, nh=4 (hd=4), nkv=2, I=24, V=64, E=4, K=2, Di=32, N=4, W=4, R=ceil(16/16)=1.
inline JambaConfig tiny_config() {
  JambaConfig c;
  c.vocab_size = 64;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.num_experts = 4;
  c.num_experts_per_tok = 2;
  c.expert_layer_period = 2;
  c.expert_layer_offset = 1;
  c.attn_layer_period = 4;
  c.attn_layer_offset = 1;
  c.mamba_d_state = 4;
  c.mamba_d_conv = 4;
  c.mamba_expand = 2;
  c.mamba_dt_rank_auto = true;
  c.mamba_dt_rank = 1;
  c.eos_token_ids = {2};
  return c;
}

struct TestTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;  // numel entries
  DType dtype = DType::F32;
};

// Every tensor a checkpoint of config c holds (per-expert names unless fused), filled with small
// deterministic values; norms 1, A_log = log(1..N), D = 1 (jamba-spec.md §3.12).
inline std::vector<TestTensor> tiny_tensors(const JambaConfig& c, bool fused_experts = false) {
  const int64_t H = c.hidden_size, V = c.vocab_size, I = c.intermediate_size, hd = c.head_dim();
  const int64_t Di = c.mamba_inner(), N = c.mamba_d_state, W = c.mamba_d_conv, R = c.mamba_dt_rank;
  const int64_t E = c.num_experts, nh = c.num_attention_heads, nkv = c.num_key_value_heads;
  std::vector<TestTensor> ts;
  uint32_t seed = 12345;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, int kind = 0) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      seed = seed * 1664525u + 1013904223u;
      float r = (static_cast<float>(seed >> 8) / 16777216.0f - 0.5f) * 0.2f;  // [-0.1, 0.1)
      v[i] = kind == 1 ? 1.0f : kind == 2 ? std::log(static_cast<float>(i % N + 1)) : r;
    }
    ts.push_back({name, std::move(shape), std::move(v), DType::F32});
  };
  add("model.embed_tokens.weight", {V, H});
  add("model.final_layernorm.weight", {H}, 1);
  if (!c.tie_word_embeddings) add("lm_head.weight", {V, H});
  if (c.num_register_tokens > 0) add("model.register_tokens", {c.num_register_tokens, H});
  const LayerSchedule sched = LayerSchedule::from_config(c);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {H}, 1);
    add(p + "pre_ff_layernorm.weight", {H}, 1);
    if (sched[i].has_attention()) {
      add(p + "self_attn.q_proj.weight", {nh * hd, H});
      add(p + "self_attn.k_proj.weight", {nkv * hd, H});
      add(p + "self_attn.v_proj.weight", {nkv * hd, H});
      add(p + "self_attn.o_proj.weight", {H, nh * hd});
    } else {
      std::string m = p + "mamba.";
      add(m + "in_proj.weight", {2 * Di, H});
      if (c.mamba_proj_bias) add(m + "in_proj.bias", {2 * Di});
      add(m + "conv1d.weight", {Di, 1, W});
      if (c.mamba_conv_bias) add(m + "conv1d.bias", {Di});
      add(m + "x_proj.weight", {R + 2 * N, Di});
      add(m + "dt_layernorm.weight", {R}, 1);
      add(m + "b_layernorm.weight", {N}, 1);
      add(m + "c_layernorm.weight", {N}, 1);
      add(m + "dt_proj.weight", {Di, R});
      add(m + "dt_proj.bias", {Di});
      add(m + "A_log", {Di, N}, 2);
      add(m + "D", {Di}, 1);
      add(m + "out_proj.weight", {H, Di});
      if (c.mamba_proj_bias) add(m + "out_proj.bias", {H});
    }
    std::string f = p + "feed_forward.";
    if (sched[i].is_moe()) {
      add(f + "router.weight", {E, H});
      if (fused_experts) {
        add(f + "experts.gate_up_proj", {E, 2 * I, H});
        add(f + "experts.down_proj", {E, H, I});
      } else {
        for (int64_t e = 0; e < E; ++e) {
          std::string x = f + "experts." + std::to_string(e) + ".";
          add(x + "gate_proj.weight", {I, H});
          add(x + "up_proj.weight", {I, H});
          add(x + "down_proj.weight", {H, I});
        }
      }
    } else {
      add(f + "gate_proj.weight", {I, H});
      add(f + "up_proj.weight", {I, H});
      add(f + "down_proj.weight", {H, I});
    }
  }
  return ts;
}

inline TestTensor* find_tensor(std::vector<TestTensor>& ts, const std::string& name) {
  for (TestTensor& t : ts) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

inline void write_safetensors(const std::string& path, const std::vector<TestTensor>& ts) {
  SafetensorsWriter w;
  for (const TestTensor& t : ts) w.add_float(t.name, t.dtype, t.shape, t.values.data());
  w.write(path);
}

// Writes config.json and model.safetensors for c; `edit` may change the tensor list first.
inline void write_tiny_checkpoint(const std::string& dir, const JambaConfig& c,
                                  const std::function<void(std::vector<TestTensor>&)>& edit = {},
                                  bool fused_experts = false) {
  std::vector<TestTensor> ts = tiny_tensors(c, fused_experts);
  if (edit) edit(ts);
  write_text(dir + "/config.json", config_to_json(c));
  write_safetensors(dir + "/model.safetensors", ts);
}

// The message of the LoadError that fn throws ("" and a test failure when it throws none or another type).
inline std::string load_error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Cancelled& e) {
    ADD_FAILURE() << "expected LoadError, got Cancelled";
    return "";
  } catch (const LoadError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected LoadError, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected LoadError, nothing was thrown";
  return "";
}

}  // namespace hl::test

// Asserts that `stmt` throws LoadError whose message contains `part`; prints the message otherwise.
#define EXPECT_LOAD_ERROR(stmt, part)                                                                            \
  do {                                                                                                           \
    std::string hl_msg_ = ::hl::test::load_error_of([&] { (void)(stmt); });                                      \
    EXPECT_NE(hl_msg_.find(part), std::string::npos) << "message: " << hl_msg_ << "\nexpected part: " << (part); \
  } while (0)
