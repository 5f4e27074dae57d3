// Helpers for the session tests: synthetic recordings (every field filled, consistent with a
// config, no model needed), record-by-record equality with the first differing value in the
// message, and editors for the safetensors header / manifest of serialized session bytes.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/core/checksum.h"
#include "engine/core/error.h"
#include "engine/model/layer_schedule.h"
#include "sessions/recording.h"
#include "sessions/session_file.h"

namespace hl::test {

// Deterministic values in [-1, 1).
inline float lcg_value(uint32_t& s) {
  s = s * 1664525u + 1013904223u;
  return static_cast<float>(s >> 8) / 8388608.0f - 1.0f;
}

// A run of T records with every field of the config's sizes; attention rows are positive and sum to 1.
inline Run synthetic_run(const JambaConfig& c, int64_t T, int n_reg, uint32_t seed, const std::string& label = "A") {
  const LayerSchedule sched = LayerSchedule::from_config(c);
  const int64_t An = sched.num_attention(), Mn = sched.num_ssm(), Xn = sched.num_moe();
  const int64_t nh = c.num_attention_heads, L1 = c.num_hidden_layers + 1, Di = c.mamba_inner();
  Run run;
  run.label = label;
  run.settings.registers_used = n_reg;
  run.settings.registers = n_reg;
  run.prompt_tokens = T;
  run.load_seconds = 0.125;
  run.run_seconds = 0.001 * static_cast<double>(T);
  auto fill = [&](std::vector<float>& v, int64_t n) {
    v.resize(static_cast<size_t>(n));
    for (float& x : v) x = lcg_value(seed);
  };
  for (int64_t t = 0; t < T; ++t) {
    TokenTrace r;
    r.token_id = static_cast<int32_t>((seed >> 9) % static_cast<uint32_t>(c.vocab_size));
    r.position = static_cast<int32_t>(t);
    fill(r.logits, c.vocab_size);
    fill(r.attn_entropy, An * nh);
    fill(r.attn_entropy_norm, An * nh);
    fill(r.attn_mass, An * nh);
    fill(r.attn_max_logit, An * nh);
    fill(r.ssm_delta_mean, Mn);
    fill(r.router_probs, Xn * c.num_experts);
    for (int64_t i = 0; i < Xn * c.num_experts_per_tok; ++i) {
      r.router_topk.push_back(static_cast<int32_t>((seed >> 5) % static_cast<uint32_t>(c.num_experts)));
      lcg_value(seed);
    }
    fill(r.router_lse, Xn);
    fill(r.rank1_distance, L1);
    fill(r.resid_max_abs, L1);
    r.nonfinite_layer = t == 3 ? 1 : -1;
    r.kv_cache_bytes = 1000 + t;
    r.ssm_state_bytes = 777;
    r.step_seconds = 1e-3 * (1.0 + lcg_value(seed));
    fill(r.ssm_delta, Mn * Di);
    fill(r.ssm_retained, Mn * Di);
    const int64_t len = n_reg + t + 2;
    r.attn_rows.resize(static_cast<size_t>(An * nh * len));
    for (int64_t s = 0; s < An * nh; ++s) {
      for (int64_t j = 0; j < len; ++j) r.attn_rows[s * len + j] = 1.0f / static_cast<float>(len);
    }
    run.records.push_back(std::move(r));
  }
  return run;
}

inline Recording synthetic_recording(const JambaConfig& c, int64_t T, uint32_t seed) {
  Recording rec;
  rec.config = c;
  rec.checkpoint = {"/models/tiny", "tiny", std::string(64, 'c'), std::string(64, 'w')};
  rec.prompt = "a prompt with \"quotes\" and ünïcode";
  Run run = synthetic_run(c, T, 0, seed);
  for (const TokenTrace& r : run.records) {
    rec.tokens.push_back(r.token_id);
    rec.token_text.push_back("tok" + std::to_string(r.token_id));
  }
  rec.runs.push_back(std::move(run));
  return rec;
}

// Bitwise equality of two float vectors; the message names the first differing index and values.
inline ::testing::AssertionResult same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) {
    return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], 4) != 0) {
      return ::testing::AssertionFailure() << "first difference at [" << i << "]: " << a[i] << " vs " << b[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// Every field of every record equal bit for bit (full fields too when `full_exact`; the measured
// step time only when `timing`).
inline void expect_runs_equal(const Run& a, const Run& b, bool full_exact, bool timing = true) {
  ASSERT_EQ(a.records.size(), b.records.size()) << "run " << a.label;
  for (size_t t = 0; t < a.records.size(); ++t) {
    const TokenTrace &x = a.records[t], &y = b.records[t];
    SCOPED_TRACE("run " + a.label + " token " + std::to_string(t));
    EXPECT_EQ(x.token_id, y.token_id);
    EXPECT_EQ(x.position, y.position);
    EXPECT_EQ(x.nonfinite_layer, y.nonfinite_layer);
    EXPECT_EQ(x.kv_cache_bytes, y.kv_cache_bytes);
    EXPECT_EQ(x.ssm_state_bytes, y.ssm_state_bytes);
    if (timing) EXPECT_EQ(x.step_seconds, y.step_seconds);
    EXPECT_TRUE(same_bits(x.logits, y.logits)) << "logits";
    EXPECT_TRUE(same_bits(x.attn_entropy, y.attn_entropy)) << "attn_entropy";
    EXPECT_TRUE(same_bits(x.attn_entropy_norm, y.attn_entropy_norm)) << "attn_entropy_norm";
    EXPECT_TRUE(same_bits(x.attn_mass, y.attn_mass)) << "attn_mass";
    EXPECT_TRUE(same_bits(x.attn_max_logit, y.attn_max_logit)) << "attn_max_logit";
    EXPECT_TRUE(same_bits(x.ssm_delta_mean, y.ssm_delta_mean)) << "ssm_delta_mean";
    EXPECT_TRUE(same_bits(x.router_probs, y.router_probs)) << "router_probs";
    EXPECT_EQ(x.router_topk, y.router_topk);
    EXPECT_TRUE(same_bits(x.router_lse, y.router_lse)) << "router_lse";
    EXPECT_TRUE(same_bits(x.rank1_distance, y.rank1_distance)) << "rank1_distance";
    EXPECT_TRUE(same_bits(x.resid_max_abs, y.resid_max_abs)) << "resid_max_abs";
    if (full_exact) {
      EXPECT_TRUE(same_bits(x.ssm_delta, y.ssm_delta)) << "ssm_delta";
      EXPECT_TRUE(same_bits(x.ssm_retained, y.ssm_retained)) << "ssm_retained";
      EXPECT_TRUE(same_bits(x.attn_rows, y.attn_rows)) << "attn_rows";
    }
  }
}

// The message of the hl::Error fn throws, or "(no error)".
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}
#define EXPECT_THAT_ERROR_CONTAINS(stmt, part)                                  \
  do {                                                                          \
    const std::string hl_msg_ = ::hl::test::error_of([&] { (void)(stmt); });    \
    EXPECT_NE(hl_msg_.find(part), std::string::npos) << "message: " << hl_msg_; \
  } while (0)

// --- editing serialized sessions -------------------------------------------------------------

inline std::string header_text(const std::vector<uint8_t>& b) {
  uint64_t n = 0;
  std::memcpy(&n, b.data(), 8);
  return std::string(reinterpret_cast<const char*>(b.data()) + 8, n);
}

// The same file with another header (the data section is kept as it is).
inline std::vector<uint8_t> with_header_text(const std::vector<uint8_t>& b, const std::string& h) {
  uint64_t old = 0;
  std::memcpy(&old, b.data(), 8);
  const uint64_t n = h.size(), rest = b.size() - 8 - old;
  std::vector<uint8_t> out(8 + n + rest);
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, h.data(), n);
  std::memcpy(out.data() + 8 + n, b.data() + 8 + old, rest);
  return out;
}

using ojson = nlohmann::ordered_json;

// Recomputes the checksums a writer stores after an edit (each tensor's in the manifest's
// "checksums", the manifest's in __metadata__), so a corruption row reaches the check behind them.
// Files without checksums, manifests that are not JSON and offsets outside the data are left as they are.
inline std::vector<uint8_t> reseal(const std::vector<uint8_t>& b) {
  ojson h = ojson::parse(header_text(b));
  auto meta = h.find("__metadata__");
  if (meta == h.end() || !meta->is_object() || !meta->contains(kSessionMetadataKey)) return b;
  std::string text = (*meta)[kSessionMetadataKey].get<std::string>();
  ojson m = ojson::parse(text, nullptr, false);
  if (m.is_object() && m.contains("checksums") && m["checksums"].contains("tensors")) {
    uint64_t n = 0;
    std::memcpy(&n, b.data(), 8);
    for (auto& el : m["checksums"]["tensors"].items()) {
      const std::string name = el.key();
      if (!h.contains(name) || !h[name].contains("data_offsets")) continue;
      const uint64_t lo = h[name]["data_offsets"][0].get<uint64_t>(), hi = h[name]["data_offsets"][1].get<uint64_t>();
      if (lo > hi || 8 + n + hi > b.size()) continue;
      el.value() = checksum_hex(checksum64(b.data() + 8 + n + lo, hi - lo));
    }
    text = m.dump();
    (*meta)[kSessionMetadataKey] = text;
  }
  if (meta->contains(kSessionManifestChecksumKey))
    (*meta)[kSessionManifestChecksumKey] = checksum_hex(checksum64(text.data(), text.size()));
  return with_header_text(b, h.dump());
}

// Edits the safetensors header JSON (tensor entries) with fn; then reseals the checksums unless told not to.
inline std::vector<uint8_t> edit_header(const std::vector<uint8_t>& b, const std::function<void(ojson&)>& fn,
                                        bool resealed = true) {
  ojson h = ojson::parse(header_text(b));
  fn(h);
  const std::vector<uint8_t> out = with_header_text(b, h.dump());
  return resealed ? reseal(out) : out;
}

// Edits the manifest JSON with fn.
inline std::vector<uint8_t> edit_manifest(const std::vector<uint8_t>& b, const std::function<void(ojson&)>& fn) {
  return edit_header(b, [&](ojson& h) {
    ojson m = ojson::parse(h["__metadata__"][kSessionMetadataKey].get<std::string>());
    fn(m);
    h["__metadata__"][kSessionMetadataKey] = m.dump();
  });
}

// Replaces the manifest text itself (for invalid JSON).
inline std::vector<uint8_t> set_manifest_text(const std::vector<uint8_t>& b, const std::string& text) {
  return edit_header(b, [&](ojson& h) { h["__metadata__"][kSessionMetadataKey] = text; });
}

// Overwrites element i of a 4-byte tensor in the data section (checksums resealed unless told not to).
inline std::vector<uint8_t> poke_i32(std::vector<uint8_t> b, const std::string& tensor, size_t i, int32_t v,
                                     bool resealed = true) {
  const ojson h = ojson::parse(header_text(b));
  uint64_t n = 0;
  std::memcpy(&n, b.data(), 8);
  const uint64_t at = 8 + n + h[tensor]["data_offsets"][0].get<uint64_t>() + 4 * i;
  std::memcpy(b.data() + at, &v, 4);
  return resealed ? reseal(b) : b;
}

}  // namespace hl::test
