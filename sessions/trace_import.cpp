// Trace importer (see trace_import.h): validates a trace file's tensors against each other and the
// config (given or inferred) and unstacks them into per-token TokenTraces. Reference: the writer
// engine/trace/trace_file.cpp and trace-format.md §3.
#include "sessions/trace_import.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "engine/core/error.h"
#include "engine/io/safetensors.h"

namespace hl {

namespace {

constexpr int64_t kMaxTokens = int64_t{1} << 22;

struct Reader {
  const SafetensorsFile& f;
  std::string file;

  [[noreturn]] void fail(const std::string& msg) const { throw LoadError(file + ": " + msg); }

  // The tensor, checked for dtype and shape (`expect` entries < 0 are free and filled in).
  const TensorInfo* get(const std::string& name, DType dtype, std::vector<int64_t> expect, bool required,
                        std::vector<int64_t>* shape = nullptr) const {
    const TensorInfo* t = f.find(name);
    if (!t) {
      if (required) fail("tensor '" + name + "' is missing (every trace has it)");
      return nullptr;
    }
    if (t->dtype != dtype)
      fail("tensor '" + name + "': dtype " + dtype_name(t->dtype) + ", expected " + dtype_name(dtype));
    bool ok = t->shape.size() == expect.size();
    for (size_t i = 0; ok && i < expect.size(); ++i) ok = expect[i] < 0 ? t->shape[i] > 0 : t->shape[i] == expect[i];
    if (!ok) {
      std::string e = "(";
      for (size_t i = 0; i < expect.size(); ++i)
        e += (i ? ", " : "") + (expect[i] < 0 ? std::string("·") : std::to_string(expect[i]));
      fail("tensor '" + name + "': shape " + shape_to_string(t->shape) + ", expected " + e + ")");
    }
    if (shape) *shape = t->shape;
    return t;
  }
};

template <typename T>
void copyOut(const TensorInfo* t, int64_t offset, int64_t n, T* dst) {
  std::memcpy(dst, t->data + offset * static_cast<int64_t>(sizeof(T)), static_cast<size_t>(n) * sizeof(T));
}

template <typename T>
std::vector<T> slice(const TensorInfo* t, int64_t token, int64_t per) {
  std::vector<T> v(static_cast<size_t>(per));
  copyOut(t, token * per, per, v.data());
  return v;
}

}  // namespace

bool infer_schedule(int64_t L, int64_t count, int64_t* period, int64_t* offset) {
  if (count <= 0) {
    *period = L + 1;
    *offset = L;
    return true;
  }
  auto countOf = [L](int64_t p, int64_t o) { return o < L ? (L - 1 - o) / p + 1 : 0; };
  if (L % count == 0) {
    const int64_t p = L / count;
    *period = p;
    *offset = p / 2;
    return true;
  }
  int64_t best = -1;
  for (int64_t p = 1; p <= L; ++p)
    for (int64_t o = 0; o < p; ++o) {
      if (countOf(p, o) != count) continue;
      const int64_t score = std::llabs(o - p / 2) * (L + 1) + p;
      if (best < 0 || score < best) {
        best = score;
        *period = p;
        *offset = o;
      }
    }
  return best >= 0;
}

Recording import_trace(const std::string& path, const TraceImportOptions& opts) {
  const SafetensorsFile f = SafetensorsFile::open(path);
  const Reader rd{f, base_name(path)};
  const auto& meta = f.metadata();
  auto metaOr = [&](const char* k) {
    auto it = meta.find(k);
    return it == meta.end() ? std::string() : it->second;
  };
  const std::string version = metaOr("format_version");
  if (version != "1") rd.fail("format_version '" + version + "', expected \"1\" (a hybridlens trace file)");

  std::vector<int64_t> sh;
  const TensorInfo* ids = rd.get("token_ids", DType::I32, {-1}, true, &sh);
  const int64_t T = sh[0];
  if (T > kMaxTokens) rd.fail("token_ids: " + std::to_string(T) + " tokens, at most " + std::to_string(kMaxTokens));
  const TensorInfo* rank1 = rd.get("rank1_distance", DType::F32, {T, -1}, true, &sh);
  const int64_t L = sh[1] - 1;
  if (L < 1) rd.fail("rank1_distance: shape " + shape_to_string(sh) + ", expected (T, L + 1) with L >= 1");
  const TensorInfo* ent = f.find("attn_entropy") ? rd.get("attn_entropy", DType::F32, {T, -1, -1}, true, &sh) : nullptr;
  const int64_t An = ent ? sh[1] : 0, nhT = ent ? sh[2] : 0;
  const TensorInfo* dmean =
      f.find("ssm_delta_mean") ? rd.get("ssm_delta_mean", DType::F32, {T, -1}, true, &sh) : nullptr;
  const int64_t Mn = dmean ? sh[1] : 0;
  if (An + Mn != L)
    rd.fail("attention layers (" + std::to_string(An) + ", attn_entropy) + Mamba layers (" + std::to_string(Mn) +
            ", ssm_delta_mean) = " + std::to_string(An + Mn) + ", expected L = " + std::to_string(L) +
            " from rank1_distance");
  const TensorInfo* probs =
      f.find("router_probs") ? rd.get("router_probs", DType::F32, {T, -1, -1}, true, &sh) : nullptr;
  const int64_t Xn = probs ? sh[1] : 0, E = probs ? sh[2] : 1;
  const TensorInfo* topk = probs ? rd.get("router_topk", DType::I32, {T, Xn, -1}, true, &sh) : nullptr;
  const int64_t K = topk ? sh[2] : 1;
  if (topk && K > E) rd.fail("router_topk: k = " + std::to_string(K) + " exceeds E = " + std::to_string(E));
  const TensorInfo* logits = f.find("logits") ? rd.get("logits", DType::F32, {T, -1}, true, &sh) : nullptr;
  const int64_t V = logits ? sh[1] : 0;
  const TensorInfo* delta =
      Mn > 0 && f.find("ssm_delta") ? rd.get("ssm_delta", DType::F32, {T, Mn, -1}, true, &sh) : nullptr;
  const int64_t DiT = delta ? sh[2] : 0;
  const TensorInfo* kv = rd.get("kv_cache_bytes", DType::I64, {T}, true);
  const TensorInfo* st = rd.get("ssm_state_bytes", DType::I64, {T}, true);

  // Registers: the metadata's count, checked against attn_rows' key axis.
  int64_t nReg = 0;
  const std::string regs = metaOr("registers");
  if (!regs.empty()) {
    try {
      size_t used = 0;
      nReg = std::stoll(regs, &used);
      if (used != regs.size() || nReg < 0 || nReg > (1 << 16)) throw std::invalid_argument("range");
    } catch (const std::exception&) {
      rd.fail("metadata 'registers' = '" + regs + "', expected an integer in [0, 65536]");
    }
  }
  const TensorInfo* rows =
      An > 0 && f.find("attn_rows") ? rd.get("attn_rows", DType::F32, {T, An, nhT, -1}, true, &sh) : nullptr;
  if (rows) {
    const int64_t cols = sh[3];
    if (cols - T - 1 < 0 || (!regs.empty() && cols - T - 1 != nReg))
      rd.fail("attn_rows: " + std::to_string(cols) +
              " columns, expected n_reg + T + 1 = " + std::to_string(nReg + T + 1));
    nReg = cols - T - 1;
  }

  // The config: given, or inferred from the shapes and the byte counters.
  JambaConfig c;
  if (opts.config) {
    c = *opts.config;
    auto check = [&](const char* what, int64_t got, int64_t want) {
      if (got != want)
        rd.fail(std::string(what) + " = " + std::to_string(got) + " in the trace, " + std::to_string(want) +
                " in the given config");
    };
    check("L", L, c.num_hidden_layers);
    check("A_n", An, c.num_attention_layers());
    check("M_n", Mn, c.num_mamba_layers());
    check("X_n", Xn, c.num_moe_layers());
    if (An > 0) check("num_attention_heads", nhT, c.num_attention_heads);
    if (probs) check("num_experts", E, c.num_experts);
    if (topk) check("num_experts_per_tok", K, c.num_experts_per_tok);
    if (logits) check("vocab_size", V, c.vocab_size);
    if (delta) check("Di", DiT, c.mamba_inner());
  } else {
    c.num_hidden_layers = L;
    if (!infer_schedule(L, An, &c.attn_layer_period, &c.attn_layer_offset) ||
        !infer_schedule(L, Xn, &c.expert_layer_period, &c.expert_layer_offset))
      rd.fail("no Jamba layer schedule (period, offset) gives " + std::to_string(An) + " attention and " +
              std::to_string(Xn) + " MoE layers of " + std::to_string(L));
    c.num_experts = probs ? E : 1;
    c.num_experts_per_tok = probs ? K : 1;
    c.vocab_size = V > 0 ? V : 1;
    c.num_register_tokens = nReg;
    c.mamba_d_state = 16;
    c.mamba_d_conv = 4;
    const int64_t nh = An > 0 ? nhT : 1;
    c.num_attention_heads = nh;
    int64_t st0 = 0, kv0 = 0;
    copyOut(st, 0, 1, &st0);
    copyOut(kv, 0, 1, &kv0);
    // Di: from ssm_delta, else from the state bytes at 4 bytes per element (the CPU reference).
    int64_t Di = DiT;
    if (Di == 0 && Mn > 0 && st0 > 0) Di = std::max<int64_t>(1, st0 / (Mn * (c.mamba_d_conv + c.mamba_d_state) * 4));
    // Hidden size: Di / 2 (mamba_expand 2) when that splits into the heads; head_dim · nkv · bytes from the KV.
    c.mamba_expand = Di > 0 && Di % 2 == 0 ? 2 : 1;
    int64_t H = Di > 0 ? Di / c.mamba_expand : nh;
    const int64_t perTok = An > 0 ? kv0 / (2 * An * (nReg + 1)) : 0;  // nkv · head_dim · bytes
    c.num_key_value_heads = nh;
    if (An > 0 && perTok > 0) {
      if (H % nh != 0) H = nh * std::max<int64_t>(1, H / nh);
      const int64_t hd = H / nh;
      int64_t nkv = 0;
      for (int64_t b : {4, 2, 1})
        if (perTok % (hd * b) == 0 && perTok / (hd * b) >= 1 && perTok / (hd * b) <= nh &&
            nh % (perTok / (hd * b)) == 0) {
          nkv = perTok / (hd * b);
          break;
        }
      if (nkv > 0) {
        c.num_key_value_heads = nkv;
      } else {  // no split with these heads: one KV head of the whole per-token width at 1 byte
        c.num_key_value_heads = 1;
        H = nh * perTok;
        c.mamba_expand = 1;
      }
    }
    c.hidden_size = std::max<int64_t>(1, H);
    c.max_position_embeddings = std::max<int64_t>(262144, T + nReg);
  }

  Recording rec;
  rec.checkpoint.name = metaOr("checkpoint");
  rec.checkpoint.config_sha256 = metaOr("config_sha256");
  rec.engine_version = metaOr("engine_version");
  rec.config = c;
  rec.tokens.resize(static_cast<size_t>(T));
  copyOut(ids, 0, T, rec.tokens.data());
  Run run;
  run.label = "A";
  const std::string norm = metaOr("normalizer");
  run.settings.normalizer_override = !norm.empty() && norm != "as-trained";
  if (run.settings.normalizer_override && !parse_normalizer(norm, &run.settings.normalizer))
    rd.fail("metadata 'normalizer' = '" + norm + "', expected as-trained, softmax, softmax1 or sink");
  run.settings.registers = static_cast<int>(nReg);
  run.settings.registers_used = static_cast<int>(nReg);
  run.settings.adapter = metaOr("adapter");
  run.settings.backend = metaOr("backend");
  run.settings.full = rows || delta;
  run.prompt_tokens = T;

  const int64_t nh = c.num_attention_heads, Di = c.mamba_inner();
  const TensorInfo* entN = An > 0 ? rd.get("attn_entropy_norm", DType::F32, {T, An, nh}, true) : nullptr;
  const TensorInfo* mass = An > 0 ? rd.get("attn_mass", DType::F32, {T, An, nh}, true) : nullptr;
  const TensorInfo* maxl = An > 0 ? rd.get("attn_max_logit", DType::F32, {T, An, nh}, true) : nullptr;
  const TensorInfo* lse = probs ? rd.get("router_lse", DType::F32, {T, Xn}, true) : nullptr;
  const TensorInfo* resid = rd.get("resid_max_abs", DType::F32, {T, L + 1}, true);
  const TensorInfo* nonf = rd.get("nonfinite_layer", DType::I32, {T}, true);
  const TensorInfo* ret = delta ? rd.get("ssm_retained", DType::F32, {T, Mn, Di}, true) : nullptr;
  if (delta && DiT != Di) rd.fail("ssm_delta: Di = " + std::to_string(DiT) + ", expected " + std::to_string(Di));

  run.records.resize(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    TokenTrace& r = run.records.edit(static_cast<size_t>(t));
    r.token_id = rec.tokens[static_cast<size_t>(t)];
    r.position = static_cast<int32_t>(t);
    if (logits && opts.logits) r.logits = slice<float>(logits, t, V);
    if (An > 0) {
      r.attn_entropy = slice<float>(ent, t, An * nh);
      r.attn_entropy_norm = slice<float>(entN, t, An * nh);
      r.attn_mass = slice<float>(mass, t, An * nh);
      r.attn_max_logit = slice<float>(maxl, t, An * nh);
    }
    if (Mn > 0) r.ssm_delta_mean = slice<float>(dmean, t, Mn);
    if (probs) {
      r.router_probs = slice<float>(probs, t, Xn * E);
      r.router_topk = slice<int32_t>(topk, t, Xn * K);
      r.router_lse = slice<float>(lse, t, Xn);
      for (int32_t e : r.router_topk)
        if (e < 0 || e >= E)
          rd.fail("router_topk: expert " + std::to_string(e) + " at token " + std::to_string(t) + ", expected [0, " +
                  std::to_string(E) + ")");
    }
    r.rank1_distance = slice<float>(rank1, t, L + 1);
    r.resid_max_abs = slice<float>(resid, t, L + 1);
    copyOut(nonf, t, 1, &r.nonfinite_layer);
    copyOut(kv, t, 1, &r.kv_cache_bytes);
    copyOut(st, t, 1, &r.ssm_state_bytes);
    if (delta) {
      r.ssm_delta = slice<float>(delta, t, Mn * Di);
      r.ssm_retained = slice<float>(ret, t, Mn * Di);
    }
    if (rows) {
      // (A_n, nh, n_reg + T + 1) → (A_n, nh, n_reg + t + 2): keys so far, then p_null (last column).
      const int64_t cols = nReg + T + 1, have = nReg + t + 2;
      r.attn_rows.resize(static_cast<size_t>(An * nh * have));
      for (int64_t s = 0; s < An * nh; ++s) {
        const int64_t src = (t * An * nh + s) * cols;
        copyOut(rows, src, have - 1, r.attn_rows.data() + s * have);
        copyOut(rows, src + cols - 1, 1, r.attn_rows.data() + s * have + have - 1);
      }
    }
  }
  rec.runs.push_back(std::move(run));
  return rec;
}

}  // namespace hl
