// GGUF → state dict: the metadata reader, the tensor-table checks and the widening shared by every
// architecture; each architecture's own keys and names are in gguf_arch_<family>.cpp.
#include "engine/io/gguf_import.h"

#include <algorithm>
#include <optional>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

#include "engine/core/ggml_quant.h"
#include "engine/core/thread_pool.h"
#include "engine/io/file_check.h"
#include "engine/io/gguf_arch.h"

namespace hl {

std::string GgufMeta::where(const std::string& key) const { return base_name(files.first().path()) + ": " + key; }

const GgufValue& GgufMeta::need(const std::string& key) const {
  const GgufValue* v = files.find_value(key);
  if (!v) throw LoadError(where(key) + ": missing (architecture " + arch + " needs it)");
  return *v;
}

int64_t GgufMeta::integer(const std::string& key, int64_t lo, int64_t hi) const {
  const GgufValue& v = need(key);
  const bool ok = v.is_int() && !(v.type == GgufValueType::U64 && v.u > 0x7fffffffffffffffull) && v.i >= lo && v.i <= hi;
  if (!ok)
    throw LoadError(where(key) + ": " + gguf_value_type_name(v.type) + (v.is_int() ? " " + std::to_string(v.i) : "") +
                    " (allowed an integer in " + std::to_string(lo) + ".." + std::to_string(hi) + ")");
  return v.i;
}

int64_t GgufMeta::integer_or(const std::string& key, int64_t fallback, int64_t lo, int64_t hi) const {
  return files.find_value(key) ? integer(key, lo, hi) : fallback;
}

double GgufMeta::real(const std::string& key, double lo, double hi) const {
  const GgufValue& v = need(key);
  const double x = v.is_float() ? v.f : static_cast<double>(v.i);
  if (!(v.is_float() || v.is_int()) || !(x >= lo && x <= hi))
    throw LoadError(where(key) + ": " + gguf_value_type_name(v.type) + " (allowed a number in " + std::to_string(lo) + ".." +
                    std::to_string(hi) + ")");
  return x;
}

double GgufMeta::real_or(const std::string& key, double fallback, double lo, double hi) const {
  return has(key) ? real(key, lo, hi) : fallback;
}

bool GgufMeta::boolean_or(const std::string& key, bool fallback) const {
  const GgufValue* v = files.find_value(key);
  if (!v) return fallback;
  if (v->type != GgufValueType::BOOL) throw LoadError(where(key) + ": " + gguf_value_type_name(v->type) + " (allowed a BOOL)");
  return v->u != 0;
}

std::vector<int64_t> GgufMeta::per_layer(const std::string& key, int64_t layers, int64_t lo, int64_t hi) const {
  const GgufValue& v = need(key);
  if (!v.is_array()) return std::vector<int64_t>(static_cast<size_t>(layers), integer(key, lo, hi));
  if (!v.is_int_array() || static_cast<int64_t>(v.ints.size()) != layers)
    throw LoadError(where(key) + ": an array of " + std::to_string(v.count) + " " + gguf_value_type_name(v.elem) +
                    " (allowed " + std::to_string(layers) + " integers, one per layer, or one integer)");
  for (size_t i = 0; i < v.ints.size(); ++i)
    if (v.ints[i] < lo || v.ints[i] > hi)
      throw LoadError(where(key) + "[" + std::to_string(i) + "]: " + std::to_string(v.ints[i]) + " (allowed " +
                      std::to_string(lo) + ".." + std::to_string(hi) + ")");
  return v.ints;
}

namespace {

std::string ne_text(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

void pread_all(int fd, uint8_t* dst, uint64_t n, uint64_t at, const std::string& path) {
  while (n > 0) {
    const ssize_t got = ::pread(fd, dst, static_cast<size_t>(std::min<uint64_t>(n, uint64_t{1} << 30)), static_cast<off_t>(at));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw LoadError(path + ": cannot read: " + std::strerror(errno));
    if (got == 0) throw LoadError(path + ": changed on disk while loading (ends before byte " + std::to_string(at + n) + ")");
    dst += got;
    at += static_cast<uint64_t>(got);
    n -= static_cast<uint64_t>(got);
  }
}

}  // namespace

const GgufTensor& GgufTensors::take(const std::string& name, const std::vector<int64_t>& ne) {
  const GgufTensor* t = optional(name, ne);
  if (!t) throw LoadError(file_ + ": tensor '" + name + "' is missing (expected ne " + ne_text(ne) + ")");
  return *t;
}

const GgufTensor* GgufTensors::optional(const std::string& name, const std::vector<int64_t>& ne) {
  const GgufTensor* t = files_.find(name);
  if (!t) return nullptr;
  // Trailing 1s are not stored by every writer ([64] and [64, 1] are the same vector).
  std::vector<int64_t> a = t->ne, b = ne;
  while (a.size() > 1 && a.back() == 1) a.pop_back();
  while (b.size() > 1 && b.back() == 1) b.pop_back();
  if (a != b) throw LoadError(file_ + ": tensor " + quote_name(name) + " has ne " + ne_text(t->ne) + ", expected " + ne_text(ne));
  if (!ggml_can_dequantize(t->type))
    throw LoadError(file_ + ": tensor " + quote_name(name) + " has type " + ggml_type_name(t->type) +
                    " (allowed " + ggml_dequantizable_names() + ")");
  used_.insert(name);
  return t;
}

bool GgufTensors::has(const std::string& name) const { return files_.find(name) != nullptr; }

std::vector<int64_t> GgufTensors::ne_of(const std::string& name) const {
  const GgufTensor* t = files_.find(name);
  return t ? t->ne : std::vector<int64_t>{};
}

const GgufArch* find_gguf_arch(const std::string& name) {
  for (const GgufArch& a : GgufArchRegistry::entries())
    if (a.name == name) return &a;
  return nullptr;
}

std::vector<std::string> gguf_supported_architectures() {
  std::vector<std::string> out;
  for (const GgufArch& a : GgufArchRegistry::entries()) out.push_back(a.name);
  std::sort(out.begin(), out.end());
  return out;
}

void gguf_read_dims(const GgufMeta& m, JambaConfig& c, int64_t context_default) {
  c.torch_dtype = "float32";
  c.num_hidden_layers = m.integer(m.key("block_count"), 1, 4096);
  c.hidden_size = m.integer(m.key("embedding_length"), 1, 1 << 20);
  c.num_attention_heads = m.integer(m.key("attention.head_count"), 1, 1 << 16);
  const std::string ctx = m.key("context_length");
  c.max_position_embeddings =
      context_default < 0 ? m.integer(ctx, 1, int64_t{1} << 40) : m.integer_or(ctx, context_default, 1, int64_t{1} << 40);
  c.rms_norm_eps = m.real(m.key("attention.layer_norm_rms_epsilon"), 0.0, 1.0);
}

void gguf_schedule_period(const GgufMeta& m, const std::vector<bool>& selected, const std::string& what, int64_t* period,
                          int64_t* offset) {
  const int64_t L = static_cast<int64_t>(selected.size());
  int64_t first = -1;
  for (int64_t i = 0; i < L && first < 0; ++i)
    if (selected[static_cast<size_t>(i)]) first = i;
  if (first < 0) {
    *period = L + 1;
    *offset = L;
    return;
  }
  for (int64_t p = first + 1; p <= L + 1; ++p) {
    bool fits = true;
    for (int64_t i = 0; i < L && fits; ++i) fits = selected[static_cast<size_t>(i)] == (i % p == first);
    if (fits) {
      *period = p;
      *offset = first;
      return;
    }
  }
  std::string list;
  for (int64_t i = 0; i < L; ++i)
    if (selected[static_cast<size_t>(i)]) list += (list.empty() ? "" : ", ") + std::to_string(i);
  throw LoadError(base_name(m.files.first().path()) + ": " + what + " are layers " + list +
                  " (allowed a periodic schedule: layer i where i % period == offset, as Jamba's config describes it)");
}

void GgufTensors::declare(const std::string& hf_name, std::vector<int64_t> shape) {
  if (!index_.emplace(hf_name, declared_.size()).second)
    throw LoadError(file_ + ": state-dict tensor " + quote_name(hf_name) + " is made twice (a mapping error of architecture " + arch_ + ")");
  declared_.push_back({hf_name, std::move(shape)});
}

GgufImportOp& GgufTensors::add_op(const std::string& hf_name, int64_t dst_offset, const GgufTensor& src, int64_t first_row,
                                  int64_t rows) {
  const auto it = index_.find(hf_name);
  const int64_t total = src.numel() / src.ne[0];
  if (rows < 0) rows = total;
  if (it == index_.end() || first_row < 0 || rows > total - first_row)
    throw LoadError(file_ + ": tensor " + quote_name(src.name) + " rows " + std::to_string(first_row) + "+" + std::to_string(rows) +
                    " of " + std::to_string(total) + " for " + quote_name(hf_name) + " (a mapping error of architecture " + arch_ + ")");
  GgufImportOp op;
  op.tensor = it->second;
  op.dst_offset = dst_offset;
  op.src = &src;
  op.first_row = first_row;
  op.rows = rows;
  ops_.push_back(op);
  return ops_.back();
}

void GgufTensors::emit(const std::string& hf_name, std::vector<int64_t> shape, const GgufTensor& src, int64_t first_row,
                       int64_t rows, GgufImportOp::Kind kind) {
  declare(hf_name, std::move(shape));
  add_op(hf_name, 0, src, first_row, rows).kind = kind;
}

void GgufTensors::emit_unpermuted(const std::string& hf_name, std::vector<int64_t> shape, const GgufTensor& src, int64_t heads) {
  if (shape.empty() || heads < 1 || shape[0] % (2 * heads) != 0)
    throw LoadError(file_ + ": tensor " + quote_name(src.name) + " has " + (shape.empty() ? "no" : std::to_string(shape[0])) +
                    " rows (allowed a multiple of 2 x " + std::to_string(heads) + " heads: llama.cpp permutes rotary pairs)");
  declare(hf_name, std::move(shape));
  GgufImportOp& op = add_op(hf_name, 0, src, 0, -1);
  op.kind = GgufImportOp::Kind::UnpermuteQK;
  op.heads = heads;
}

void GgufTensors::emit_into(const std::string& hf_name, int64_t dst_offset, const GgufTensor& src, int64_t first_row,
                            int64_t rows) {
  add_op(hf_name, dst_offset, src, first_row, rows);
}

void GgufTensors::check_all_used() const {
  for (const GgufTensor* t : files_.all_tensors())
    if (!used_.count(t->name))
      throw LoadError(file_ + ": tensor " + quote_name(t->name) + " is not used by architecture " + arch_ +
                      " (no layer of this model has it)");
}

std::shared_ptr<GgufImport> import_gguf(const std::string& path) {
  return import_gguf_files(std::make_shared<const GgufModelFiles>(GgufModelFiles::open(path, FileAccess::Map)));
}

std::shared_ptr<GgufImport> import_gguf_files(std::shared_ptr<const GgufModelFiles> files_ptr) {
  auto im = std::make_shared<GgufImport>();
  im->files = std::move(files_ptr);
  const GgufModelFiles& files = *im->files;
  const GgufValue* arch = files.find_value("general.architecture");
  const std::string file = base_name(files.first().path());
  if (!arch || arch->type != GgufValueType::STRING)
    throw LoadError(file + ": general.architecture: " + (arch ? "not a string" : "missing") + " (allowed a string naming the architecture)");
  im->architecture = arch->s;
  const GgufArch* a = find_gguf_arch(arch->s);
  if (!a) {
    std::string known;
    for (const std::string& n : gguf_supported_architectures()) known += (known.empty() ? "" : ", ") + n;
    throw LoadError(file + ": general.architecture: " + quote_name(arch->s) + " is not supported (allowed " + known + ")");
  }
  GgufMeta meta{files, arch->s};
  GgufTensors tensors(files, file, arch->s);
  JambaConfig c = a->config(meta, tensors);
  // Token ids and vocabulary from the tokenizer metadata, the embedding's rows otherwise.
  c.bos_token_id = meta.integer_or("tokenizer.ggml.bos_token_id", -1, 0, c.vocab_size - 1);
  const int64_t eos = meta.integer_or("tokenizer.ggml.eos_token_id", -1, 0, c.vocab_size - 1);
  c.eos_token_ids = eos >= 0 ? std::vector<int64_t>{eos} : std::vector<int64_t>{};
  c.pad_token_id = meta.integer_or("tokenizer.ggml.padding_token_id", -1, 0, c.vocab_size - 1);
  // The config passes the checks of a config.json (ranges, the family's rules).
  im->config_text = config_to_json(c);
  im->config = parse_config(im->config_text, file + " (GGUF metadata as config)");
  a->tensors(meta, im->config, tensors);
  tensors.check_all_used();
  im->ops = tensors.take_ops();
  const std::vector<GgufImportTensor> declared = tensors.take_declared();
  im->has_tokenizer = files.find_value("tokenizer.ggml.model") != nullptr;

  // The state dict's layout; nothing resident until materialize(). Each tensor's pieces must cover it
  // exactly once. A matrix (2-D) made only of whole stored rows of one type keeps that type (F16,
  // BF16 or a ggml block format: the kernels read blocks, core/dtype.h); everything else is widened
  // to F32 (vectors, and the tensors a transform rewrites).
  std::vector<std::vector<std::pair<int64_t, int64_t>>> pieces(declared.size());  // (offset, elements)
  std::vector<std::optional<DType>> kept(declared.size());
  std::vector<bool> widen(declared.size(), false);
  for (const GgufImportOp& op : im->ops) {
    pieces[op.tensor].push_back({op.dst_offset, op.rows * op.src->ne[0]});
    const std::vector<int64_t>& shape = declared[op.tensor].shape;
    const std::optional<DType> t = dtype_from_ggml(op.src->type);
    const bool rows_whole = shape.size() == 2 && op.src->ne[0] == shape[1] && op.kind != GgufImportOp::Kind::LogNeg;
    if (!rows_whole || !t || *t == DType::F32 || (kept[op.tensor] && *kept[op.tensor] != *t)) widen[op.tensor] = true;
    kept[op.tensor] = t;
  }
  uint64_t total = 0;
  std::vector<int64_t> numel(declared.size());
  for (size_t k = 0; k < declared.size(); ++k) {
    int64_t n = 1;
    for (int64_t d : declared[k].shape) n = d > 0 && n <= (int64_t{1} << 60) / d ? n * d : -1;
    std::sort(pieces[k].begin(), pieces[k].end());
    int64_t at = 0;
    for (const auto& [off, count] : pieces[k]) at = off == at ? at + count : -1;
    if (n < 0 || at != n)
      throw LoadError(file + ": " + quote_name(declared[k].name) + " of shape " + shape_to_string(declared[k].shape) + " is made of " +
                      std::to_string(pieces[k].size()) + " pieces that do not cover it exactly once (a mapping error of architecture " +
                      im->architecture + ")");
    numel[k] = n;
    if (widen[k]) kept[k].reset();
    total += static_cast<uint64_t>(kept[k] ? dtype_row_bytes(*kept[k], n) : n * 4);
  }
  im->buffer = std::make_shared<AnonBuffer>(total, "the widened GGUF weights");
  uint64_t at = 0;
  im->tensors.resize(declared.size());
  for (size_t k = 0; k < declared.size(); ++k) {
    TensorInfo& t = im->tensors[k];
    t.name = declared[k].name;
    t.dtype = kept[k] ? *kept[k] : DType::F32;
    t.shape = declared[k].shape;
    t.begin = at;
    t.end = at + static_cast<uint64_t>(dtype_row_bytes(t.dtype, numel[k]));
    t.data = im->buffer->data() + at;
    at = t.end;
  }
  for (auto it = im->ops.rbegin(); it != im->ops.rend(); ++it) im->tensors[it->tensor].file = it->src->file;  // the first piece's
  return im;
}

namespace {

// Reads rows [r0, r0 + rows) of op's source (rows past first_row) into raw.
void read_rows(const GgufImportOp& op, const GgufFile& shard, int fd, uint64_t row_bytes, int64_t r0, int64_t rows,
               std::vector<uint8_t>& raw) {
  const GgufTensor& t = *op.src;
  raw.resize(static_cast<size_t>(row_bytes * static_cast<uint64_t>(rows)));
  const uint64_t at = shard.data_start() + t.offset + row_bytes * static_cast<uint64_t>(op.first_row + r0);
  pread_all(fd, raw.data(), raw.size(), at, t.file);
}

// An op into a tensor kept in its stored type, from the open source file fd: the stored rows are
// copied as they are (Copy), or each head's rows put back in HF's order (UnpermuteQK, rows of the 2-D
// tensor), chunk_rows at a time.
void copy_op(GgufImport& im, const GgufImportOp& op, const GgufFile& shard, int fd, uint64_t row_bytes, int64_t chunk_rows,
             std::vector<uint8_t>& raw) {
  const TensorInfo& out = im.tensors[op.tensor];
  uint8_t* dst = im.buffer->data() + out.begin + dtype_row_bytes(out.dtype, op.dst_offset);
  for (int64_t r0 = 0; r0 < op.rows; r0 += chunk_rows) {
    const int64_t rows = std::min(chunk_rows, op.rows - r0);
    read_rows(op, shard, fd, row_bytes, r0, rows, raw);
    if (op.kind != GgufImportOp::Kind::UnpermuteQK) {
      std::memcpy(dst + row_bytes * static_cast<uint64_t>(r0), raw.data(), raw.size());
      continue;
    }
    // Stored row p = h·2·half + 2j + s goes to HF row h·2·half + s·half + j.
    const int64_t half = out.shape[0] / op.heads / 2;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t p = r0 + r, h = p / (2 * half), j = (p % (2 * half)) / 2, s = p % 2;
      std::memcpy(dst + row_bytes * static_cast<uint64_t>(h * 2 * half + s * half + j),
                  raw.data() + row_bytes * static_cast<uint64_t>(r), static_cast<size_t>(row_bytes));
    }
  }
}

// Reads op's stored rows, widens them into the buffer and applies its transform; `raw` is the
// calling thread's scratch.
void widen_op(GgufImport& im, const GgufImportOp& op, uint64_t chunk_bytes, std::vector<uint8_t>& raw) {
  const GgufTensor& t = *op.src;
  const GgufFile* shard = nullptr;
  for (const GgufFile& f : im.files->shards())
    if (f.path() == t.file) shard = &f;
  if (!shard) throw LoadError(t.file + ": tensor " + quote_name(t.name) + " names a file that is not a shard of this model");
  const int64_t n0 = t.ne[0];
  const uint64_t row_bytes = static_cast<uint64_t>(ggml_row_bytes(t.type, n0));
  // A large tensor (an embedding, stacked experts) never needs a second copy of itself in its stored form.
  const int64_t chunk_rows = static_cast<int64_t>(std::max<uint64_t>(1, chunk_bytes / std::max<uint64_t>(row_bytes, 1)));
  const TensorInfo& out = im.tensors[op.tensor];
  auto* dst = reinterpret_cast<float*>(im.buffer->data() + out.begin) + op.dst_offset;
  const int fd = ::open(t.file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw LoadError(t.file + ": cannot open: " + std::strerror(errno));
  try {
    if (out.dtype != DType::F32) {  // kept in its stored type: whole rows copied, rows unpermuted
      copy_op(im, op, *shard, fd, row_bytes, chunk_rows, raw);
      ::close(fd);
      return;
    }
    for (int64_t r0 = 0; r0 < op.rows; r0 += chunk_rows) {
      const int64_t rows = std::min(chunk_rows, op.rows - r0);
      read_rows(op, *shard, fd, row_bytes, r0, rows, raw);
      for (int64_t r = 0; r < rows; ++r)
        ggml_dequantize_row(t.type, raw.data() + row_bytes * static_cast<uint64_t>(r), dst + (r0 + r) * n0, n0);
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  const int64_t n = op.rows * n0;
  if (op.kind == GgufImportOp::Kind::LogNeg) {
    for (int64_t i = 0; i < n; ++i) {
      if (!(dst[i] < 0))  // A = −exp(A_log) is negative; 0, a positive value or NaN has no A_log
        throw LoadError(t.file + ": tensor " + quote_name(t.name) + ": element " + std::to_string(i) + " is " +
                        std::to_string(dst[i]) + " (allowed A < 0: the file stores A = -exp(A_log))");
      dst[i] = std::log(-dst[i]);
    }
  } else if (op.kind == GgufImportOp::Kind::UnpermuteQK) {
    // Along the HF first axis (rows of `unit` elements): head h's row s·half + j ← stored row 2j + s.
    const int64_t units = im.tensors[op.tensor].shape[0], unit = n / units, half = units / op.heads / 2;
    std::vector<float> in(dst, dst + n);
    for (int64_t h = 0; h < op.heads; ++h)
      for (int64_t s = 0; s < 2; ++s)
        for (int64_t j = 0; j < half; ++j)
          std::memcpy(dst + (h * 2 * half + s * half + j) * unit, in.data() + (h * 2 * half + 2 * j + s) * unit,
                      static_cast<size_t>(unit) * sizeof(float));
  }
}

}  // namespace

void materialize(GgufImport& im, uint64_t chunk_bytes) {
  if (im.materialized) return;
  // Ops write disjoint ranges of the buffer, so they run on the thread pool; the error reported is
  // the first op's in file order, whatever thread met it first.
  ThreadPool& pool = ThreadPool::global();
  std::vector<std::vector<uint8_t>> raw(static_cast<size_t>(pool.size()));
  std::vector<std::string> errors(im.ops.size());
  pool.parallel_for(static_cast<int64_t>(im.ops.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      try {
        widen_op(im, im.ops[static_cast<size_t>(k)], chunk_bytes, raw[static_cast<size_t>(ThreadPool::thread_index())]);
      } catch (const LoadError& e) {
        errors[static_cast<size_t>(k)] = e.what();
      }
    }
  });
  for (const std::string& e : errors)
    if (!e.empty()) throw LoadError(e);
  // The files changed after their headers were read: refuse rather than mix two versions.
  for (const GgufFile& f : im.files->shards())
    if (f.mapping())
      if (const std::string what = f.mapping()->stamp().change(); !what.empty())
        throw LoadError(f.path() + ": changed on disk while loading (" + what + ")");
  im.materialized = true;
}

}  // namespace hl
