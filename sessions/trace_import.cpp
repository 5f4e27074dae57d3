// Trace importer (see trace_import.h): validates a trace file's tensors against each other, the
// shared input limits (engine/io/input_limits.h) and the available memory, then unstacks them into
// per-token TokenTraces. Not the writer: engine/trace/trace_file.cpp; reference trace-format.md §3.
#include "sessions/trace_import.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "engine/core/error.h"
#include "engine/core/sys_memory.h"
#include "engine/io/file_check.h"
#include "engine/io/input_limits.h"
#include "engine/io/safetensors.h"
#include "engine/model/layer_schedule.h"
#include "engine/trace/trace_fields.h"

namespace hl {

namespace {

// A file at least this large whose blocks on disk are under 1/16 of its size has holes (a trace
// writer writes every byte; even zero-heavy attn_rows compress less than 16x on ZFS or btrfs).
constexpr uint64_t kSparseCheckBytes = uint64_t{64} << 20;
constexpr uint64_t kSparseRatio = 16;
// Copied ranges of the mapping are given back to the kernel in steps of this many bytes.
constexpr uint64_t kReleaseStep = uint64_t{64} << 20;

struct Reader {
  const SafetensorsFile& f;
  std::string file;

  [[noreturn]] void fail(const std::string& msg) const { throw LoadError(file + ": " + msg); }

  // A declared size within [lo, hi], else one line naming the tensor, what it counts and the range.
  int64_t bounded(const std::string& tensor, const char* what, int64_t v, int64_t lo, int64_t hi) const {
    if (v < lo || v > hi)
      fail("tensor " + quote_name(tensor) + ": " + std::to_string(v) + " " + what + ", allowed [" + std::to_string(lo) +
           ", " + std::to_string(hi) + "]");
    return v;
  }

  // The tensor, checked for dtype and shape (`expect` entries < 0 are free and filled in).
  const TensorInfo* get(const std::string& name, DType dtype, std::vector<int64_t> expect, bool required,
                        std::vector<int64_t>* shape = nullptr) const {
    const TensorInfo* t = f.find(name);
    if (!t) {
      if (required) fail("tensor " + quote_name(name) + " is missing (every trace has it)");
      return nullptr;
    }
    if (t->dtype != dtype)
      fail("tensor " + quote_name(name) + ": dtype " + dtype_name(t->dtype) + ", expected " + dtype_name(dtype));
    bool ok = t->shape.size() == expect.size();
    for (size_t i = 0; ok && i < expect.size(); ++i) ok = expect[i] < 0 ? t->shape[i] > 0 : t->shape[i] == expect[i];
    if (!ok) {
      std::string e = "(";
      for (size_t i = 0; i < expect.size(); ++i)
        e += (i ? ", " : "") + (expect[i] < 0 ? std::string("·") : std::to_string(expect[i]));
      fail("tensor " + quote_name(name) + ": shape " + shape_to_string(t->shape) + ", expected " + e + ")");
    }
    if (shape) *shape = t->shape;
    return t;
  }
};

template <typename T>
void copyOut(const TensorInfo* t, int64_t offset, int64_t n, T* dst) {
  std::memcpy(dst, t->data + offset * static_cast<int64_t>(sizeof(T)), static_cast<size_t>(n) * sizeof(T));
}

// Gives the pages of a tensor's bytes [from, to) back to the kernel once copied into the records,
// so resident memory is the records and not also the mapped file (MADV_DONTNEED on a read-only
// private file mapping: a later touch re-reads the file). Only for a file mapping (`mapped`).
void release(bool mapped, const TensorInfo* t, uint64_t from, uint64_t to) {
  if (!mapped || to <= from) return;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t a = (reinterpret_cast<uintptr_t>(t->data) + from + page - 1) / page * page;
  const uintptr_t b = (reinterpret_cast<uintptr_t>(t->data) + to) / page * page;
  if (b > a) ::madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED);
}

// Copies a (T, per) tensor into one member of every record, releasing the copied pages as it goes.
template <typename T>
void unstack(bool mapped, const TensorInfo* t, int64_t per, std::vector<TokenTrace>& recs,
             std::vector<T> TokenTrace::*member) {
  if (!t) return;
  uint64_t done = 0;
  for (size_t i = 0; i < recs.size(); ++i) {
    std::vector<T>& v = recs[i].*member;
    v.resize(static_cast<size_t>(per));
    copyOut(t, static_cast<int64_t>(i) * per, per, v.data());
    const uint64_t end = (i + 1) * static_cast<uint64_t>(per) * sizeof(T);
    if (end - done >= kReleaseStep) {
      release(mapped, t, done, end);
      done = end;
    }
  }
  release(mapped, t, done, t->nbytes());
}

// stored: bytes the file holds on disk (st_blocks), UINT64_MAX for a buffer; mapped: f is a file mapping.
Recording read_trace(const SafetensorsFile& f, const std::string& name, bool mapped, uint64_t stored,
                     const TraceImportOptions& opts) {
  const Reader rd{f, name};
  using namespace limits;
  const auto& meta = f.metadata();
  auto metaOr = [&](const char* k) {
    auto it = meta.find(k);
    return it == meta.end() ? std::string() : it->second;
  };
  const std::string version = metaOr("format_version");
  if (version != "1") rd.fail("format_version " + quote_name(version) + ", expected \"1\" (a hybridlens trace file)");

  std::vector<int64_t> sh;
  const TensorInfo* ids = rd.get("token_ids", DType::I32, {-1}, true, &sh);
  const int64_t T = rd.bounded("token_ids", "tokens", sh[0], 1, kMaxTokens);
  const TensorInfo* rank1 = rd.get("rank1_distance", DType::F32, {T, -1}, true, &sh);
  const int64_t L = rd.bounded("rank1_distance", "layers + 1", sh[1], 2, kMaxLayers + 1) - 1;
  const TensorInfo* ent = f.find("attn_entropy") ? rd.get("attn_entropy", DType::F32, {T, -1, -1}, true, &sh) : nullptr;
  const int64_t An = ent ? rd.bounded("attn_entropy", "attention layers", sh[1], 1, L) : 0;
  const int64_t nhT = ent ? rd.bounded("attn_entropy", "heads", sh[2], 1, kMaxHidden) : 0;
  const TensorInfo* dmean =
      f.find("ssm_delta_mean") ? rd.get("ssm_delta_mean", DType::F32, {T, -1}, true, &sh) : nullptr;
  const int64_t Mn = dmean ? rd.bounded("ssm_delta_mean", "Mamba layers", sh[1], 1, L) : 0;
  if (An + Mn != L)
    rd.fail("attention layers (" + std::to_string(An) + ", attn_entropy) + Mamba layers (" + std::to_string(Mn) +
            ", ssm_delta_mean) = " + std::to_string(An + Mn) + ", expected L = " + std::to_string(L) +
            " from rank1_distance");
  const TensorInfo* probs =
      f.find("router_probs") ? rd.get("router_probs", DType::F32, {T, -1, -1}, true, &sh) : nullptr;
  const int64_t Xn = probs ? rd.bounded("router_probs", "MoE layers", sh[1], 1, L) : 0;
  const int64_t E = probs ? rd.bounded("router_probs", "experts", sh[2], 1, kMaxExperts) : 1;
  const TensorInfo* topk = probs ? rd.get("router_topk", DType::I32, {T, Xn, -1}, true, &sh) : nullptr;
  const int64_t K = topk ? rd.bounded("router_topk", "experts per token", sh[2], 1, E) : 1;
  const TensorInfo* logits = f.find("logits") ? rd.get("logits", DType::F32, {T, -1}, true, &sh) : nullptr;
  const int64_t V = logits ? rd.bounded("logits", "vocabulary entries", sh[1], 1, kMaxVocab) : 0;
  const TensorInfo* delta =
      Mn > 0 && f.find("ssm_delta") ? rd.get("ssm_delta", DType::F32, {T, Mn, -1}, true, &sh) : nullptr;
  const int64_t DiT =
      delta ? rd.bounded("ssm_delta", "Mamba channels (Di)", sh[2], 1, kMaxMambaExpand * kMaxHidden) : 0;
  const TensorInfo* kv = rd.get("kv_cache_bytes", DType::I64, {T}, true);
  const TensorInfo* st = rd.get("ssm_state_bytes", DType::I64, {T}, true);

  // Registers: the metadata's count, checked against attn_rows' key axis.
  int64_t nReg = 0;
  const std::string regs = metaOr("registers");
  if (!regs.empty()) {
    try {
      size_t used = 0;
      nReg = std::stoll(regs, &used);
      if (used != regs.size() || nReg < 0 || nReg > kMaxRegisters) throw std::invalid_argument("range");
    } catch (const std::exception&) {
      rd.fail("metadata 'registers' = " + quote_name(regs) + ", expected an integer in [0, " +
              std::to_string(kMaxRegisters) + "]");
    }
  }
  const TensorInfo* rows =
      An > 0 && f.find("attn_rows") ? rd.get("attn_rows", DType::F32, {T, An, nhT, -1}, true, &sh) : nullptr;
  if (rows) {
    const int64_t cols = sh[3];
    if (cols - T - 1 < 0 || (!regs.empty() && cols - T - 1 != nReg))
      rd.fail("attn_rows: " + std::to_string(cols) +
              " columns, expected n_reg + T + 1 = " + std::to_string(nReg + T + 1));
    nReg = rd.bounded("attn_rows", "columns", cols, T + 1, T + 1 + kMaxRegisters) - T - 1;
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
    const LayerSchedule sched = LayerSchedule::from_config(c);
    check("L", L, sched.size());
    check("A_n", An, sched.num_attention());
    check("M_n", Mn, sched.num_ssm());
    check("X_n", Xn, sched.num_moe());
    if (An > 0) check("num_attention_heads", nhT, c.num_attention_heads);
    if (probs) check("num_experts", E, c.num_experts);
    if (topk) check("num_experts_per_tok", K, c.num_experts_per_tok);
    if (logits) check("vocab_size", V, c.vocab_size);
    if (delta) check("Di", DiT, c.mamba_inner());
  } else {
    c.num_hidden_layers = L;
    if (!jamba_period_offset(L, An, &c.attn_layer_period, &c.attn_layer_offset) ||
        !jamba_period_offset(L, Xn, &c.expert_layer_period, &c.expert_layer_offset))
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
    if (Di > kMaxMambaExpand * kMaxHidden)
      rd.fail("tensor 'ssm_state_bytes': token 0: " + std::to_string(st0) + " bytes imply " + std::to_string(Di) +
              " Mamba channels, allowed [1, " + std::to_string(kMaxMambaExpand * kMaxHidden) + "]");
    // Hidden size: Di / 2 (mamba_expand 2) when that splits into the heads; head_dim · nkv · bytes from the KV.
    c.mamba_expand = Di > 0 && Di % 2 == 0 ? 2 : 1;
    int64_t H = Di > 0 ? Di / c.mamba_expand : nh;
    const int64_t perTok = An > 0 ? kv0 / (2 * An * (nReg + 1)) : 0;  // nkv · head_dim · bytes
    if (perTok > kMaxHidden * 8)  // nkv · head_dim <= hidden_size, at most 8 bytes an element
      rd.fail("tensor 'kv_cache_bytes': token 0: " + std::to_string(kv0) + " bytes imply " + std::to_string(perTok) +
              " bytes a cached token and layer, allowed [0, " + std::to_string(kMaxHidden * 8) + "]");
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
    if (c.hidden_size > kMaxHidden)
      rd.fail("tensors 'kv_cache_bytes' and 'ssm_state_bytes' imply hidden size " + std::to_string(c.hidden_size) +
              ", allowed [1, " + std::to_string(kMaxHidden) + "]");
    c.max_position_embeddings = std::max<int64_t>(262144, T + nReg);
  }

  // The other vector fields of the table (trace_fields.h), checked against the table's shape in
  // the symbols now known: required where their axes are not empty (the --full ones with ssm_delta)
  // unless the table marks them optional (added after format version 1).
  const int64_t nh = c.num_attention_heads, Di = c.mamba_inner();
  const TraceDims d = TraceDims::of(c, LayerSchedule::from_config(c));
  // The tensors read above, which define the symbols (their checks are worded where they are read).
  const std::pair<const char*, const TensorInfo*> inferred[] = {
      {"logits", logits},      {"attn_entropy", ent}, {"ssm_delta_mean", dmean}, {"router_probs", probs},
      {"router_topk", topk},   {"rank1_distance", rank1}, {"ssm_delta", delta}, {"attn_rows", rows}};
  std::vector<const TensorInfo*> tensor(trace_fields().size(), nullptr);
  const TensorInfo* nonf = nullptr;
  for (size_t i = 0; i < tensor.size(); ++i) {
    const TraceField& fl = trace_fields()[i];
    if (fl.shape == FieldShape::Scalar) {
      if (fl.i32 == &TokenTrace::nonfinite_layer) nonf = rd.get(fl.name, DType::I32, {T}, true);
      if (fl.f32) tensor[i] = rd.get(fl.name, DType::F32, {T}, !fl.optional);  // derived: from logits if absent
      continue;
    }
    bool known = false;
    for (const auto& [n, t] : inferred)
      if (std::strcmp(n, fl.name) == 0) {
        tensor[i] = t;
        known = true;
      }
    if (known || token_size(fl, d) == 0 || (fl.full && !delta)) continue;
    std::vector<int64_t> shape = {T};
    for (int64_t x : token_dims(fl, d)) shape.push_back(x);
    tensor[i] = rd.get(fl.name, fl.fvec ? DType::F32 : DType::I32, shape, !fl.optional);
  }
  if (delta && DiT != Di) rd.fail("ssm_delta: Di = " + std::to_string(DiT) + ", expected " + std::to_string(Di));

  // Holes: the data a sparse file declares is not on disk, yet reading it costs memory like real data.
  const uint64_t declared = f.tensors().empty() ? 0 : f.tensors().back().end;
  if (declared >= kSparseCheckBytes && stored < declared / kSparseRatio)
    rd.fail("a sparse file: its tensors declare " + std::to_string(declared / 1000000) + " MB, " +
            std::to_string(stored / 1000000) + " MB are stored on disk (at least 1/" + std::to_string(kSparseRatio) +
            " expected; a trace writer leaves no holes)");

  // Memory the records will take (every dimension is bounded above, so no product overflows a
  // double's exact range), checked against what this process may allocate before allocating it.
  const bool keepLogits = logits && opts.logits;
  double perToken = static_cast<double>(sizeof(TokenTrace));
  for (size_t i = 0; i < tensor.size(); ++i) {
    const TraceField& fl = trace_fields()[i];
    if (tensor[i] && fl.shape == FieldShape::Vector && (keepLogits || fl.fvec != &TokenTrace::logits))
      perToken += 4.0 * static_cast<double>(token_size(fl, d));
  }
  const double rowBytes = rows ? 4.0 * static_cast<double>(An * nh) *
                                     (static_cast<double>(T) * static_cast<double>(nReg + 2) +
                                      static_cast<double>(T) * static_cast<double>(T - 1) / 2)
                               : 0.0;
  const double need = perToken * static_cast<double>(T) + rowBytes;
  const AvailableMemory avail = available_memory();
  if (need > static_cast<double>(avail.bytes))
    rd.fail("importing needs " + std::to_string(static_cast<uint64_t>(need / 1e6)) + " MB of memory, more than the " +
            describe(avail));

  // Per-token scalars, checked where the views index with them.
  for (int64_t t = 0; t < T; ++t) {
    int32_t id = 0, layer = 0;
    int64_t kvb = 0, stb = 0;
    copyOut(ids, t, 1, &id);
    copyOut(nonf, t, 1, &layer);
    copyOut(kv, t, 1, &kvb);
    copyOut(st, t, 1, &stb);
    const int64_t vocab = V > 0 || opts.config ? c.vocab_size : INT32_MAX;
    if (id < 0 || id >= vocab)
      rd.fail("tensor 'token_ids': token " + std::to_string(t) + " is " + std::to_string(id) + ", allowed [0, " +
              std::to_string(vocab) + ")");
    if (layer < -1 || layer > L + 1)  // L: the final norm, L + 1: the LM head
      rd.fail("tensor 'nonfinite_layer': token " + std::to_string(t) + ": layer " + std::to_string(layer) +
              ", allowed [-1, " + std::to_string(L + 1) + "]");
    if (kvb < 0 || stb < 0)
      rd.fail("tensor '" + std::string(kvb < 0 ? "kv_cache_bytes" : "ssm_state_bytes") + "': token " +
              std::to_string(t) + ": negative byte count " + std::to_string(std::min(kvb, stb)));
  }
  if (topk) {
    for (int64_t i = 0; i < T * Xn * K; ++i) {
      int32_t e = 0;
      copyOut(topk, i, 1, &e);
      if (e < 0 || e >= E)
        rd.fail("tensor 'router_topk': expert " + std::to_string(e) + " at token " + std::to_string(i / (Xn * K)) +
                ", allowed [0, " + std::to_string(E) + ")");
    }
  }

  Recording rec;
  rec.checkpoint.name = metaOr("checkpoint");
  rec.checkpoint.config_sha256 = metaOr("config_sha256");
  rec.engine_version = metaOr("engine_version");
  if (const std::string w = metaOr("weights"); w != "as-stored") rec.weights = w;  // absent in older traces: ""
  rec.config = c;
  rec.tokens.resize(static_cast<size_t>(T));
  copyOut(ids, 0, T, rec.tokens.data());
  if (V == 0 && !opts.config)  // no logits and no config: the vocabulary spans the ids seen
    rec.config.vocab_size = *std::max_element(rec.tokens.begin(), rec.tokens.end()) + int64_t{1};
  Run run;
  run.label = "A";
  const std::string norm = metaOr("normalizer");
  run.settings.normalizer_override = !norm.empty() && norm != "as-trained";
  if (run.settings.normalizer_override && !parse_normalizer(norm, &run.settings.normalizer))
    rd.fail("metadata 'normalizer' = " + quote_name(norm) + ", expected as-trained, softmax, softmax1 or sink");
  run.settings.registers = static_cast<int>(nReg);
  run.settings.registers_used = static_cast<int>(nReg);
  run.settings.adapter = metaOr("adapter");
  run.settings.backend = metaOr("backend");
  run.settings.full = rows || delta;
  run.prompt_tokens = T;

  // One tensor at a time into every record, so each tensor's pages go back once copied; the
  // records then move into the run's shared list.
  std::vector<TokenTrace> recs(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    TokenTrace& r = recs[static_cast<size_t>(t)];
    r.token_id = rec.tokens[static_cast<size_t>(t)];
    r.position = static_cast<int32_t>(t);
    copyOut(nonf, t, 1, &r.nonfinite_layer);
    copyOut(kv, t, 1, &r.kv_cache_bytes);
    copyOut(st, t, 1, &r.ssm_state_bytes);
    for (size_t i = 0; i < tensor.size(); ++i)
      if (tensor[i] && trace_fields()[i].f32) copyOut(tensor[i], t, 1, &(r.*trace_fields()[i].f32));
  }
  for (size_t i = 0; i < tensor.size(); ++i) {
    const TraceField& fl = trace_fields()[i];
    if (!tensor[i] || fl.shape != FieldShape::Vector || (!keepLogits && fl.fvec == &TokenTrace::logits)) continue;
    if (fl.fvec)
      unstack(mapped, tensor[i], token_size(fl, d), recs, fl.fvec);
    else
      unstack(mapped, tensor[i], token_size(fl, d), recs, fl.ivec);
  }
  for (size_t i = 0; i < tensor.size(); ++i) {  // derived fields a trace written before them lacks
    const TraceField& fl = trace_fields()[i];
    if (fl.derive && !tensor[i] && keepLogits)
      for (TokenTrace& r : recs) fl.derive(r);
  }
  if (rows) {
    // (A_n, nh, n_reg + T + 1) → (A_n, nh, n_reg + t + 2): keys so far, then p_null (last column).
    const int64_t cols = nReg + T + 1;
    uint64_t done = 0;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t have = nReg + t + 2;
      std::vector<float>& v = recs[static_cast<size_t>(t)].attn_rows;
      v.resize(static_cast<size_t>(An * nh * have));
      for (int64_t s = 0; s < An * nh; ++s) {
        const int64_t src = (t * An * nh + s) * cols;
        copyOut(rows, src, have - 1, v.data() + s * have);
        copyOut(rows, src + cols - 1, 1, v.data() + s * have + have - 1);
      }
      const uint64_t end = static_cast<uint64_t>((t + 1) * An * nh * cols) * 4;
      if (end - done >= kReleaseStep) {
        release(mapped, rows, done, end);
        done = end;
      }
    }
    release(mapped, rows, done, rows->nbytes());
  }
  run.records = RecordList(std::move(recs));
  rec.runs.push_back(std::move(run));
  return rec;
}

}  // namespace

Recording parse_trace(const uint8_t* bytes, uint64_t size, const std::string& name, const TraceImportOptions& opts) {
  const SafetensorsFile f = SafetensorsFile::parse(bytes, size, name);
  return read_trace(f, name, false, UINT64_MAX, opts);
}

Recording import_trace(const std::string& path, const TraceImportOptions& opts) {
  const SafetensorsFile f = SafetensorsFile::open(path);
  struct stat st;
  const uint64_t stored = ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_blocks) * 512 : UINT64_MAX;
  return read_trace(f, base_name(path), true, stored, opts);
}

}  // namespace hl
