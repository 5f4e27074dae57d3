// The trace importer's corruption table (issue 18 item 1): trace files given to `export --trace`
// are untrusted input like sessions. Each defect — the four (10^6 layers, 10^7 heads, a
// sparse file declaring 4 GiB of logits, attn_rows with 2^31 columns) and every other bound — gives
// a one-line LoadError naming the file, the tensor and the allowed range, before anything large is
// allocated or read. Large declarations are written as sparse files (holes), so the table is fast.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/core/sys_memory.h"
#include "engine/io/safetensors.h"
#include "engine/model/layer_schedule.h"
#include "sessions/trace_import.h"
#include "tests/engine/test_util.h"

namespace hl::test {
namespace {

struct Tensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // empty: a hole of the declared size (sparse file)
};

struct Spec {
  std::vector<Tensor> ts;
  std::map<std::string, std::string> meta;
  Tensor& operator[](const std::string& n) {
    for (Tensor& t : ts)
      if (t.name == n) return t;
    ts.push_back({n, "F32", {}, {}});
    return ts.back();
  }
  void erase(const std::string& n) {
    for (size_t i = 0; i < ts.size(); ++i)
      if (ts[i].name == n) ts.erase(ts.begin() + static_cast<std::ptrdiff_t>(i));
  }
};

template <typename T>
std::vector<uint8_t> raw(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<uint8_t> floats(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = 0.01f * static_cast<float>(i % 97);
  return raw(v);
}

// A trace as `hybridlens trace` writes it: T tokens, L = 4 layers (attention at layer 2, MoE at 1
// and 3), nh 2 heads, E 4 experts (k 2), V 16, Di 8, n_reg registers; --full when `full`.
Spec valid_spec(int64_t T = 3, bool full = false, int64_t n_reg = 0) {
  const int64_t L = 4, An = 1, Mn = 3, nh = 2, Xn = 2, E = 4, K = 2, V = 16, Di = 8;
  Spec s;
  std::vector<int32_t> ids, topk, nonf;
  std::vector<int64_t> kv, st;
  for (int64_t t = 0; t < T; ++t) {
    ids.push_back(static_cast<int32_t>((3 * t + 1) % V));
    nonf.push_back(-1);
    kv.push_back(2 * An * (n_reg + t + 1) * nh * (Di / 2 / nh) * 4);
    st.push_back(Mn * (4 + 16) * Di * 4);
    for (int64_t k = 0; k < Xn * K; ++k) topk.push_back(static_cast<int32_t>((t + k) % E));
  }
  s.ts = {{"token_ids", "I32", {T}, raw(ids)},
          {"logits", "F32", {T, V}, floats(T * V)},
          {"attn_entropy", "F32", {T, An, nh}, floats(T * An * nh)},
          {"attn_entropy_norm", "F32", {T, An, nh}, floats(T * An * nh)},
          {"attn_mass", "F32", {T, An, nh}, floats(T * An * nh)},
          {"attn_max_logit", "F32", {T, An, nh}, floats(T * An * nh)},
          {"ssm_delta_mean", "F32", {T, Mn}, floats(T * Mn)},
          {"router_probs", "F32", {T, Xn, E}, floats(T * Xn * E)},
          {"router_topk", "I32", {T, Xn, K}, raw(topk)},
          {"router_lse", "F32", {T, Xn}, floats(T * Xn)},
          {"rank1_distance", "F32", {T, L + 1}, floats(T * (L + 1))},
          {"resid_max_abs", "F32", {T, L + 1}, floats(T * (L + 1))},
          {"nonfinite_layer", "I32", {T}, raw(nonf)},
          {"kv_cache_bytes", "I64", {T}, raw(kv)},
          {"ssm_state_bytes", "I64", {T}, raw(st)}};
  if (full) {
    const int64_t cols = n_reg + T + 1;
    s.ts.push_back({"ssm_delta", "F32", {T, Mn, Di}, floats(T * Mn * Di)});
    s.ts.push_back({"ssm_retained", "F32", {T, Mn, Di}, floats(T * Mn * Di)});
    s.ts.push_back({"attn_rows", "F32", {T, An, nh, cols}, floats(T * An * nh * cols)});
  }
  s.meta = {{"format_version", "1"}, {"checkpoint", "t"}, {"registers", std::to_string(n_reg)}, {"backend", "cpu"}};
  return s;
}

int64_t element_size(const std::string& dtype) {
  return dtype == "I64" ? 8 : dtype == "F16" || dtype == "BF16" ? 2 : 4;
}

// Writes the spec as a safetensors file; tensors without bytes stay holes (ftruncate), so a file
// declaring gigabytes takes a few kilobytes of disk.
void write_spec(const std::string& path, const Spec& s) {
  nlohmann::json h = nlohmann::json::object();
  h["__metadata__"] = s.meta;
  uint64_t off = 0;
  for (const Tensor& t : s.ts) {
    uint64_t n = static_cast<uint64_t>(element_size(t.dtype));
    for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + n}}};
    off += n;
  }
  std::string text = h.dump();
  while ((8 + text.size()) % 8) text.push_back(' ');
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << path;
  const uint64_t n = text.size();
  ASSERT_EQ(::pwrite(fd, &n, 8, 0), 8);
  ASSERT_EQ(::pwrite(fd, text.data(), n, 8), static_cast<ssize_t>(n));
  for (const Tensor& t : s.ts) {
    const uint64_t at = 8 + n + h[t.name]["data_offsets"][0].get<uint64_t>();
    if (!t.bytes.empty()) {
      ASSERT_EQ(::pwrite(fd, t.bytes.data(), t.bytes.size(), static_cast<off_t>(at)),
                static_cast<ssize_t>(t.bytes.size()));
    }
  }
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(8 + n + off)), 0);
  ::close(fd);
}

// A tensor declared with this shape and no bytes (a hole).
void declare(Spec& s, const std::string& name, std::vector<int64_t> shape) {
  Tensor& t = s[name];
  t.shape = std::move(shape);
  t.bytes.clear();
}

struct Row {
  const char* defect;
  std::function<void(Spec&)> edit;
  const char* message;  // part of the expected message, after "bad.safetensors: "
};

std::vector<Row> corruption_table() {
  return {
      // The four cases of issue 18.
      {"10^6 layers",
       [](Spec& s) {
         declare(s, "rank1_distance", {3, 1000001});
       },
       "tensor 'rank1_distance': 1000001 layers + 1, allowed [2, 1025]"},
      {"10^7 heads",
       [](Spec& s) {
         declare(s, "attn_entropy", {3, 1, 10000000});
       },
       "tensor 'attn_entropy': 10000000 heads, allowed [1, 65536]"},
      {"4 GiB of logits in a sparse file",
       [](Spec& s) {
         s = valid_spec(1024);
         declare(s, "logits", {1024, 1 << 20});
       },
       "a sparse file: its tensors declare 4295 MB, 0 MB are stored on disk"},
      {"attn_rows with 2^31 columns",
       [](Spec& s) {
         s = valid_spec(3, true);
         s.meta.erase("registers");
         declare(s, "attn_rows", {3, 1, 2, int64_t{1} << 31});
       },
       "tensor 'attn_rows': 2147483648 columns, allowed [4, 65540]"},
      {"attn_rows with 2^31 columns, registers given",
       [](Spec& s) {
         s = valid_spec(3, true);
         declare(s, "attn_rows", {3, 1, 2, int64_t{1} << 31});
       },
       "attn_rows: 2147483648 columns, expected n_reg + T + 1 = 4"},
      // Every other bound.
      {"tokens over the limit", [](Spec& s) { declare(s, "token_ids", {(1 << 20) + 1}); },
       "tensor 'token_ids': 1048577 tokens, allowed [1, 1048576]"},
      {"vocabulary over the limit",
       [](Spec& s) {
         declare(s, "logits", {3, (1 << 24) + 1});
       },
       "tensor 'logits': 16777217 vocabulary entries, allowed [1, 16777216]"},
      {"experts over the limit",
       [](Spec& s) {
         declare(s, "router_probs", {3, 2, 1025});
       },
       "tensor 'router_probs': 1025 experts, allowed [1, 1024]"},
      {"more experts per token than experts",
       [](Spec& s) {
         declare(s, "router_topk", {3, 2, 5});
       },
       "tensor 'router_topk': 5 experts per token, allowed [1, 4]"},
      {"Mamba channels over the limit",
       [](Spec& s) {
         s = valid_spec(3, true);
         declare(s, "ssm_delta", {3, 3, 64 * 65536 + 1});
       },
       "tensor 'ssm_delta': 4194305 Mamba channels (Di), allowed [1, 4194304]"},
      {"registers over the limit", [](Spec& s) { s.meta["registers"] = "70000"; },
       "metadata 'registers' = '70000', expected an integer in [0, 65536]"},
      {"KV byte counter implying a huge hidden size",
       [](Spec& s) {
         std::vector<int64_t> kv = {int64_t{1} << 60, 0, 0};
         s["kv_cache_bytes"].bytes = raw(kv);
       },
       "tensor 'kv_cache_bytes': token 0: 1152921504606846976 bytes imply"},
      {"Mamba state counter implying a huge Di",
       [](Spec& s) {
         s.erase("ssm_delta");
         std::vector<int64_t> st = {int64_t{1} << 50, 0, 0};
         s["ssm_state_bytes"].bytes = raw(st);
       },
       "tensor 'ssm_state_bytes': token 0: 1125899906842624 bytes imply"},
      // Structure.
      {"newer format_version", [](Spec& s) { s.meta["format_version"] = "2"; }, "format_version '2', expected \"1\""},
      {"no token_ids", [](Spec& s) { s.erase("token_ids"); }, "tensor 'token_ids' is missing (every trace has it)"},
      {"T disagrees",
       [](Spec& s) {
         s["rank1_distance"].shape = {2, 5};
         s["rank1_distance"].bytes = floats(10);
       },
       "tensor 'rank1_distance': shape (2, 5), expected (3, ·)"},
      {"layer kinds do not add up",
       [](Spec& s) {
         s["ssm_delta_mean"].shape = {3, 2};
         s["ssm_delta_mean"].bytes = floats(6);
       },
       "expected L = 4 from rank1_distance"},
      {"wrong dtype", [](Spec& s) { s["logits"].dtype = "I32"; }, "tensor 'logits': dtype I32, expected F32"},
      {"expert id out of range", [](Spec& s) { s["router_topk"].bytes = raw(std::vector<int32_t>(12, 9)); },
       "tensor 'router_topk': expert 9 at token 0, allowed [0, 4)"},
      {"non-finite layer out of range",
       [](Spec& s) {
         s["nonfinite_layer"].bytes = raw(std::vector<int32_t>{-1, 7, -1});
       },
       "tensor 'nonfinite_layer': token 1: layer 7, allowed [-1, 5]"},
      {"negative byte counter",
       [](Spec& s) {
         s["kv_cache_bytes"].bytes = raw(std::vector<int64_t>{-5, 0, 0});
       },
       "tensor 'kv_cache_bytes': token 0: negative byte count -5"},
      {"token id outside the vocabulary",
       [](Spec& s) {
         s["token_ids"].bytes = raw(std::vector<int32_t>{1, 16, 2});
       },
       "tensor 'token_ids': token 1 is 16, allowed [0, 16)"},
      {"control characters in a metadata value (escaped, one line)",
       [](Spec& s) { s.meta["normalizer"] = std::string("soft\nmax\0x", 10); },
       "metadata 'normalizer' = 'soft\\nmax\\x00x', expected as-trained"},
  };
}

TEST(TraceCorruption, Table_EachDefectGivesItsOwnOneLineError) {
  TempDir d;
  write_spec(d / "good.safetensors", valid_spec());
  ASSERT_NO_THROW(import_trace(d / "good.safetensors"));
  write_spec(d / "good_full.safetensors", valid_spec(3, true, 2));
  ASSERT_NO_THROW(import_trace(d / "good_full.safetensors"));
  for (const Row& row : corruption_table()) {
    SCOPED_TRACE(row.defect);
    Spec s = valid_spec();
    row.edit(s);
    write_spec(d / "bad.safetensors", s);
    const std::string msg = load_error_of([&] { import_trace(d / "bad.safetensors"); });
    EXPECT_EQ(msg.rfind("bad.safetensors: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(row.message), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

// Without the sparse-file check (an in-memory buffer: parse_trace over a mapping of the sparse
// file), 4 GiB of logits are refused by the memory check before any record is allocated, naming
// the limit it used.
TEST(TraceCorruption, FourGibOfLogits_RefusedByTheMemoryCheck_NamesTheLimit) {
  TempDir d, root;
  Spec s = valid_spec(1024);
  declare(s, "logits", {1024, 1 << 20});
  write_spec(d / "big.safetensors", s);
  const std::shared_ptr<MappedFile> m = MappedFile::open(d / "big.safetensors");
  std::filesystem::create_directories(root / "proc");
  write_text(root / "proc/meminfo", "MemTotal: 8000000 kB\nMemAvailable: 2000000 kB\n");
  set_memory_root_for_tests(root.path);
  const std::string msg = load_error_of([&] { parse_trace(m->data(), m->size(), "big.safetensors"); });
  set_memory_root_for_tests("");
  EXPECT_NE(msg.find("big.safetensors: importing needs 4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("more than the 2.05 GB available (MemAvailable)"), std::string::npos) << msg;
  // Without logits (export never needs them when told so) the same file imports.
  TraceImportOptions o;
  o.logits = false;
  set_memory_root_for_tests(root.path);
  EXPECT_NO_THROW(parse_trace(m->data(), m->size(), "big.safetensors", o));
  set_memory_root_for_tests("");
}

// The schedule search is linear: its result equals an exhaustive search over every (period,
// offset) for small L, and L = 10^6 answers (a quadratic search would take ~10^12 steps).
TEST(TraceCorruption, ScheduleSearch_EqualsExhaustive_AndIsLinear) {
  for (int64_t L = 1; L <= 40; ++L) {
    for (int64_t count = 1; count <= L; ++count) {
      int64_t p = -1, o = -1;
      const bool found = jamba_period_offset(L, count, &p, &o);
      int64_t bp = -1, bo = -1, best = -1;
      for (int64_t pp = 1; pp <= L; ++pp)
        for (int64_t oo = 0; oo < pp; ++oo) {
          int64_t n = 0;
          for (int64_t i = 0; i < L; ++i) n += i % pp == oo;
          if (n != count) continue;
          const int64_t score = (oo > pp / 2 ? oo - pp / 2 : pp / 2 - oo) * (L + 1) + pp;
          if (best < 0 || score < best) best = score, bp = pp, bo = oo;
        }
      if (L % count == 0) {  // the Jamba rule: p = L / count, o = p / 2
        EXPECT_TRUE(found);
        EXPECT_EQ(p, L / count);
        EXPECT_EQ(o, L / count / 2);
        continue;
      }
      ASSERT_EQ(found, best >= 0) << L << " " << count;
      if (found) {
        EXPECT_EQ(p, bp) << L << " " << count;
        EXPECT_EQ(o, bo) << L << " " << count;
      }
    }
  }
  int64_t p = 0, o = 0;
  ASSERT_TRUE(jamba_period_offset(1000000, 3, &p, &o));
  int64_t n = (1000000 - 1 - o) / p + 1;
  EXPECT_EQ(n, 3);
  EXPECT_FALSE(jamba_period_offset(10, 11, &p, &o));
}

}  // namespace
}  // namespace hl::test
