// Helpers for the GGUF tokenizer tests: a minimal GGUF writer (v3, metadata only, no tensors) over
// GgufValue, value constructors, and the tokenizer.ggml.* metadata llama.cpp's converter writes for
// a byte-level tokenizer.json (tokens by id with [PADi] holes, types from the added tokens, merges
// as "a b"). Not a general GGUF writer: tools/reference/gguf/gguf_io.py is the reference one.
#pragma once
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "engine/io/gguf.h"

namespace hl::test {

struct GgufKv {
  std::string key;
  GgufValue value;
};
using GgufKvs = std::vector<GgufKv>;

inline GgufValue gv_str(std::string s) {
  GgufValue v;
  v.type = GgufValueType::STRING;
  v.s = std::move(s);
  return v;
}
inline GgufValue gv_int(GgufValueType t, int64_t x) {  // any integer scalar type
  GgufValue v;
  v.type = t;
  v.i = x;
  v.u = static_cast<uint64_t>(x);
  return v;
}
inline GgufValue gv_u32(uint32_t x) { return gv_int(GgufValueType::U32, x); }
inline GgufValue gv_bool(bool b) {
  GgufValue v;
  v.type = GgufValueType::BOOL;
  v.u = b ? 1 : 0;
  v.i = v.u;
  return v;
}
inline GgufValue gv_array(GgufValueType elem, size_t count) {
  GgufValue v;
  v.type = GgufValueType::ARRAY;
  v.elem = elem;
  v.count = count;
  return v;
}
inline GgufValue gv_strs(std::vector<std::string> s) {
  GgufValue v = gv_array(GgufValueType::STRING, s.size());
  v.strings = std::move(s);
  return v;
}
inline GgufValue gv_ints(std::vector<int64_t> x, GgufValueType elem = GgufValueType::I32) {
  GgufValue v = gv_array(elem, x.size());
  v.ints = std::move(x);
  return v;
}
inline GgufValue gv_floats(std::vector<double> x) {
  GgufValue v = gv_array(GgufValueType::F32, x.size());
  v.floats = std::move(x);
  return v;
}

// Replaces (or adds) `key`; `erase_kv` removes it.
inline void set_kv(GgufKvs& kvs, const std::string& key, GgufValue v) {
  for (GgufKv& kv : kvs)
    if (kv.key == key) {
      kv.value = std::move(v);
      return;
    }
  kvs.push_back({key, std::move(v)});
}
inline void erase_kv(GgufKvs& kvs, const std::string& key) {
  for (size_t k = 0; k < kvs.size(); ++k)
    if (kvs[k].key == key) kvs.erase(kvs.begin() + static_cast<std::ptrdiff_t>(k));
}
inline GgufValue& kv_at(GgufKvs& kvs, const std::string& key) {
  for (GgufKv& kv : kvs)
    if (kv.key == key) return kv.value;
  throw std::runtime_error("no key " + key);
}

namespace detail {
template <class T>
void put(std::string& out, T x) {
  char b[sizeof(T)];
  std::memcpy(b, &x, sizeof(T));
  out.append(b, sizeof(T));
}
inline void put_str(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}
inline void put_scalar(std::string& out, GgufValueType t, uint64_t u, int64_t i, double f, const std::string& s) {
  switch (t) {
    case GgufValueType::U8: case GgufValueType::BOOL: put<uint8_t>(out, static_cast<uint8_t>(u)); break;
    case GgufValueType::I8: put<int8_t>(out, static_cast<int8_t>(i)); break;
    case GgufValueType::U16: put<uint16_t>(out, static_cast<uint16_t>(u)); break;
    case GgufValueType::I16: put<int16_t>(out, static_cast<int16_t>(i)); break;
    case GgufValueType::U32: put<uint32_t>(out, static_cast<uint32_t>(u)); break;
    case GgufValueType::I32: put<int32_t>(out, static_cast<int32_t>(i)); break;
    case GgufValueType::U64: put<uint64_t>(out, u); break;
    case GgufValueType::I64: put<int64_t>(out, i); break;
    case GgufValueType::F32: put<float>(out, static_cast<float>(f)); break;
    case GgufValueType::F64: put<double>(out, f); break;
    case GgufValueType::STRING: put_str(out, s); break;
    default: throw std::runtime_error("gguf writer: unsupported value type");
  }
}
}  // namespace detail

// The bytes of a GGUF v3 file holding `kvs` and no tensors.
inline std::string gguf_bytes(const GgufKvs& kvs) {
  using namespace detail;
  std::string out = "GGUF";
  put<uint32_t>(out, 3);
  put<uint64_t>(out, 0);
  put<uint64_t>(out, kvs.size());
  for (const GgufKv& kv : kvs) {
    const GgufValue& v = kv.value;
    put_str(out, kv.key);
    put<uint32_t>(out, static_cast<uint32_t>(v.type));
    if (v.type != GgufValueType::ARRAY) {
      put_scalar(out, v.type, v.u, v.i, v.f, v.s);
      continue;
    }
    put<uint32_t>(out, static_cast<uint32_t>(v.elem));
    const bool strs = v.elem == GgufValueType::STRING;
    const bool flts = v.elem == GgufValueType::F32 || v.elem == GgufValueType::F64;
    const size_t n = strs ? v.strings.size() : flts ? v.floats.size() : v.ints.size();
    put<uint64_t>(out, n);
    for (size_t k = 0; k < n; ++k) {
      if (strs) put_str(out, v.strings[k]);
      else if (flts) put_scalar(out, v.elem, 0, 0, v.floats[k], "");
      else put_scalar(out, v.elem, static_cast<uint64_t>(v.ints[k]), v.ints[k], 0, "");
    }
  }
  return out;
}

inline void write_gguf(const std::string& path, const GgufKvs& kvs) {
  std::ofstream f(path, std::ios::binary);
  const std::string b = gguf_bytes(kvs);
  f.write(b.data(), static_cast<std::streamsize>(b.size()));
}

// The tokenizer.ggml.* metadata of a byte-level BPE tokenizer.json as llama.cpp's converter writes
// it (GGUF.md §6): ids as the tokenizers library assigns them (an added token already in the
// vocabulary keeps its id, the others follow the vocabulary in file order), [PADi] (unused) for
// ids without a token, added special tokens control (3), other added tokens user-defined (4).
inline GgufKvs gpt2_kvs_from_tokenizer_json(const std::string& path, const std::string& pre) {
  std::ifstream f(path);
  const nlohmann::json j = nlohmann::json::parse(f);
  std::map<int64_t, std::pair<std::string, int64_t>> by_id;
  std::map<std::string, int64_t> known;
  for (const auto& [token, id] : j["model"]["vocab"].items()) {
    by_id[id.get<int64_t>()] = {token, 1};
    known[token] = id.get<int64_t>();
  }
  int64_t next = static_cast<int64_t>(by_id.size());
  for (const auto& a : j["added_tokens"]) {
    const std::string c = a["content"];
    const auto it = known.find(c);
    const int64_t id = it != known.end() ? it->second : next++;
    known[c] = id;
    by_id[id] = {c, a["special"].get<bool>() ? 3 : 4};
  }
  std::vector<std::string> tokens;
  std::vector<int64_t> types;
  for (int64_t id = 0; id <= by_id.rbegin()->first; ++id) {
    const auto it = by_id.find(id);
    tokens.push_back(it == by_id.end() ? "[PAD" + std::to_string(id) + "]" : it->second.first);
    types.push_back(it == by_id.end() ? 5 : it->second.second);
  }
  std::vector<std::string> merges;
  for (const auto& m : j["model"]["merges"])
    merges.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
  return {{"general.architecture", gv_str("llama")},
          {"tokenizer.ggml.model", gv_str("gpt2")},
          {"tokenizer.ggml.pre", gv_str(pre)},
          {"tokenizer.ggml.tokens", gv_strs(std::move(tokens))},
          {"tokenizer.ggml.token_type", gv_ints(std::move(types))},
          {"tokenizer.ggml.merges", gv_strs(std::move(merges))}};
}

}  // namespace hl::test
