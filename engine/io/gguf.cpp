// GGUF reader: the checks of tools/reference/gguf/GGUF.md §2 in file order, then the data-section checks.
// Messages are byte-identical to the Python reference's (tools/reference/gguf/gguf_io.py), which the
// corruption-table test compares. Numbers that can pass 2^64 in a message are printed from 128 bits.
#include "engine/io/gguf.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

#include "engine/io/file_check.h"
#include "engine/io/json_util.h"  // find_invalid_utf8

namespace hl {
namespace {

constexpr uint64_t kInt64Max = 0x7fffffffffffffffull;
constexpr uint64_t kMinKvBytes = 14;          // key length 8 + 1 key byte + type 4 + 1 value byte
constexpr uint64_t kMinTensorInfoBytes = 33;  // 8 + 1 + n_dims 4 + one dim 8 + type 4 + offset 8

// ggml's type table (ggml.c type_traits): name, block, bytes per block; null name = removed id.
constexpr GgmlTypeInfo kTypes[] = {
    {"F32", 1, 4},       {"F16", 1, 2},      {"Q4_0", 32, 18},     {"Q4_1", 32, 20},   {nullptr, 0, 0},
    {nullptr, 0, 0},     {"Q5_0", 32, 22},   {"Q5_1", 32, 24},     {"Q8_0", 32, 34},   {"Q8_1", 32, 36},
    {"Q2_K", 256, 84},   {"Q3_K", 256, 110}, {"Q4_K", 256, 144},   {"Q5_K", 256, 176}, {"Q6_K", 256, 210},
    {"Q8_K", 256, 292},  {"IQ2_XXS", 256, 66}, {"IQ2_XS", 256, 74}, {"IQ3_XXS", 256, 98}, {"IQ1_S", 256, 50},
    {"IQ4_NL", 32, 18},  {"IQ3_S", 256, 110}, {"IQ2_S", 256, 82},  {"IQ4_XS", 256, 136}, {"I8", 1, 1},
    {"I16", 1, 2},       {"I32", 1, 4},      {"I64", 1, 8},        {"F64", 1, 8},      {"IQ1_M", 256, 56},
    {"BF16", 1, 2},      {nullptr, 0, 0},    {nullptr, 0, 0},      {nullptr, 0, 0},    {"TQ1_0", 256, 54},
    {"TQ2_0", 256, 66},  {nullptr, 0, 0},    {nullptr, 0, 0},      {nullptr, 0, 0},    {"MXFP4", 32, 17},
    {"NVFP4", 64, 36},   {"Q1_0", 128, 18},  {"Q2_0", 64, 18},
};
constexpr uint32_t kTypeCount = sizeof(kTypes) / sizeof(kTypes[0]);

std::string allowed_types_text() {
  std::string removed;
  for (uint32_t i = 0; i < kTypeCount; ++i)
    if (!kTypes[i].name) removed += (removed.empty() ? "" : ", ") + std::to_string(i);
  return "0.." + std::to_string(kTypeCount - 1) + " except " + removed;
}

std::string u128(unsigned __int128 v) {
  if (v == 0) return "0";
  std::string s;
  while (v) {
    s.insert(s.begin(), static_cast<char>('0' + static_cast<int>(v % 10)));
    v /= 10;
  }
  return s;
}

// Python's repr of a bytes object (the magic message): b'GGUX', b'\x00\x01'.
std::string bytes_repr(const uint8_t* p, size_t n) {
  static const char* hex = "0123456789abcdef";
  std::string s = "b'";
  for (size_t i = 0; i < n; ++i) {
    const uint8_t c = p[i];
    if (c == '\\' || c == '\'') s += std::string("\\") + static_cast<char>(c);
    else if (c == '\t') s += "\\t";
    else if (c == '\n') s += "\\n";
    else if (c == '\r') s += "\\r";
    else if (c >= 32 && c < 127) s += static_cast<char>(c);
    else s += std::string("\\x") + hex[c >> 4] + hex[c & 15];
  }
  return s + "'";
}

uint64_t value_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::U8: case GgufValueType::I8: case GgufValueType::BOOL: return 1;
    case GgufValueType::U16: case GgufValueType::I16: return 2;
    case GgufValueType::U32: case GgufValueType::I32: case GgufValueType::F32: return 4;
    case GgufValueType::U64: case GgufValueType::I64: case GgufValueType::F64: return 8;
    case GgufValueType::STRING: return 8;  // its length field: the least a string takes
    case GgufValueType::ARRAY: return 0;
  }
  return 0;
}

// Bounds-checked reading of one file's bytes; every failure is a GgufError with the reference's text.
class Cursor {
 public:
  Cursor(const std::string& path, const uint8_t* p, uint64_t n) : path_(path), p_(p), size_(n) {}
  [[noreturn]] void fail(const std::string& code, const std::string& obj, const std::string& problem) const {
    throw GgufError(code, path_ + ": " + obj + ": " + problem);
  }
  uint64_t left() const { return size_ - pos_; }
  uint64_t pos() const { return pos_; }
  const uint8_t* take(uint64_t n, const std::string& obj, const std::string& what) {
    if (n > left())
      fail("eof", obj, what + " needs " + std::to_string(n) + " bytes at offset " + std::to_string(pos_) +
                           ", the file ends after " + std::to_string(left()) + " more (file size " +
                           std::to_string(size_) + ")");
    const uint8_t* at = p_ + pos_;
    pos_ += n;
    return at;
  }
  uint64_t uint(unsigned bytes, const std::string& obj, const std::string& what) {
    const uint8_t* b = take(bytes, obj, what);
    uint64_t v = 0;
    for (unsigned i = bytes; i-- > 0;) v = v << 8 | b[i];
    return v;
  }
  std::string string(const std::string& obj, const std::string& what) {
    const uint64_t n = uint(8, obj, what + " length");
    if (n > left())
      fail("string_length", obj, what + " length " + std::to_string(n) + " runs past the end of the file (allowed 0.." +
                                     std::to_string(left()) + " bytes left at offset " + std::to_string(pos_) + ")");
    const uint8_t* b = take(n, obj, what);
    return std::string(reinterpret_cast<const char*>(b), n);
  }

 private:
  const std::string& path_;
  const uint8_t* p_;
  uint64_t size_, pos_ = 0;
};

int64_t sign_extend(uint64_t v, unsigned bytes) {
  if (bytes == 8) return static_cast<int64_t>(v);
  const uint64_t sign = uint64_t{1} << (bytes * 8 - 1);
  return static_cast<int64_t>((v ^ sign) - sign);
}

bool is_signed(GgufValueType t) {
  return t == GgufValueType::I8 || t == GgufValueType::I16 || t == GgufValueType::I32 || t == GgufValueType::I64;
}

// One scalar (not an array) of type t into v (strings into v.s, numbers into u/i/f).
void read_scalar(Cursor& cur, GgufValueType t, const std::string& obj, GgufValue& v) {
  v.type = t;
  if (t == GgufValueType::STRING) {
    v.s = cur.string(obj, "string");
    return;
  }
  const unsigned n = static_cast<unsigned>(value_size(t));
  const uint64_t raw = cur.uint(n, obj, std::string(gguf_value_type_name(t)) + " value");
  if (t == GgufValueType::F32) {
    float f;
    const uint32_t r32 = static_cast<uint32_t>(raw);
    std::memcpy(&f, &r32, 4);
    v.f = f;
  } else if (t == GgufValueType::F64) {
    std::memcpy(&v.f, &raw, 8);
  } else {
    if (t == GgufValueType::BOOL && raw > 1) cur.fail("bool_value", obj, "bool value " + std::to_string(raw) + " (allowed 0 or 1)");
    v.u = raw;
    v.i = is_signed(t) ? sign_extend(raw, n) : static_cast<int64_t>(raw);
  }
}

void read_array(Cursor& cur, const std::string& obj, GgufValue& v) {
  v.type = GgufValueType::ARRAY;
  const uint64_t et = cur.uint(4, obj, "array element type");
  if (et == static_cast<uint64_t>(GgufValueType::ARRAY))
    cur.fail("nested_array", obj, "array of arrays is not supported (allowed element types 0..8, 10..12)");
  if (et > static_cast<uint64_t>(GgufValueType::F64))
    cur.fail("array_type", obj, "array element type " + std::to_string(et) + " (allowed 0..8, 10..12)");
  const auto t = static_cast<GgufValueType>(et);
  v.elem = t;
  const uint64_t n = cur.uint(8, obj, "array count");
  const uint64_t sz = value_size(t);
  if (n > cur.left() / sz)
    cur.fail("array_count", obj, "array count " + std::to_string(n) + " of " + gguf_value_type_name(t) +
                                     " needs at least " + u128(static_cast<unsigned __int128>(n) * sz) +
                                     " bytes (allowed 0.." + std::to_string(cur.left() / sz) + " for the " +
                                     std::to_string(cur.left()) + " bytes left)");
  v.count = n;
  if (t == GgufValueType::STRING) {
    v.strings.reserve(n);
    for (uint64_t i = 0; i < n; ++i) v.strings.push_back(cur.string(obj + "[" + std::to_string(i) + "]", "string"));
    return;
  }
  if (t == GgufValueType::BOOL) {
    v.ints.reserve(n);
    for (uint64_t i = 0; i < n; ++i) {
      GgufValue e;
      read_scalar(cur, t, obj + "[" + std::to_string(i) + "]", e);
      v.ints.push_back(e.i);
    }
    return;
  }
  const uint8_t* b = cur.take(n * sz, obj, "array data");
  const bool fl = t == GgufValueType::F32 || t == GgufValueType::F64;
  (fl ? v.floats.reserve(n) : v.ints.reserve(n));
  for (uint64_t i = 0; i < n; ++i, b += sz) {
    uint64_t raw = 0;
    for (unsigned k = static_cast<unsigned>(sz); k-- > 0;) raw = raw << 8 | b[k];
    if (t == GgufValueType::F32) {
      float f;
      const uint32_t r32 = static_cast<uint32_t>(raw);
      std::memcpy(&f, &r32, 4);
      v.floats.push_back(f);
    } else if (t == GgufValueType::F64) {
      double d;
      std::memcpy(&d, &raw, 8);
      v.floats.push_back(d);
    } else {
      v.ints.push_back(is_signed(t) ? sign_extend(raw, static_cast<unsigned>(sz)) : static_cast<int64_t>(raw));
    }
  }
}

bool valid_utf8(const std::string& s) { return find_invalid_utf8(s.data(), s.size()) == SIZE_MAX; }

std::string dims_text(const std::vector<uint64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

}  // namespace

const GgmlTypeInfo* ggml_type_info(uint32_t id) {
  return id < kTypeCount && kTypes[id].name ? &kTypes[id] : nullptr;
}

std::string ggml_type_name(uint32_t id) {
  const GgmlTypeInfo* t = ggml_type_info(id);
  return t ? t->name : "type " + std::to_string(id);
}

const char* gguf_value_type_name(GgufValueType t) {
  static const char* names[] = {"UINT8", "INT8",   "UINT16", "INT16", "UINT32", "INT32",  "FLOAT32",
                                "BOOL",  "STRING", "ARRAY",  "UINT64", "INT64", "FLOAT64"};
  const auto i = static_cast<uint32_t>(t);
  return i < 13 ? names[i] : "unknown";
}

bool GgufValue::is_int() const {
  return type != GgufValueType::BOOL && type != GgufValueType::STRING && type != GgufValueType::ARRAY && !is_float();
}
bool GgufValue::is_float() const { return type == GgufValueType::F32 || type == GgufValueType::F64; }
bool GgufValue::is_int_array() const {
  return is_array() && elem != GgufValueType::BOOL && elem != GgufValueType::STRING && elem != GgufValueType::F32 &&
         elem != GgufValueType::F64;
}

int64_t GgufTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

GgufFile GgufFile::open(const std::string& path, FileAccess access) {
  check_regular_file(path, "GGUF file");
  GgufFile g;
  if (access == FileAccess::Read) {
    g.map_ = MappedFile::open_read(path);
    g.map_->read_rest();
  } else {
    g.map_ = MappedFile::open(path);
  }
  g.path_ = path;
  g.check(g.map_->data(), g.map_->size());
  return g;
}

GgufFile GgufFile::parse(const uint8_t* bytes, uint64_t size, const std::string& name) {
  GgufFile g;
  g.path_ = name;
  g.check(bytes, size);
  return g;
}

void GgufFile::check(const uint8_t* bytes, uint64_t size) {
  Cursor cur(path_, bytes, size);
  const uint8_t* magic = cur.take(4, "header", "magic");
  if (std::memcmp(magic, "GGUF", 4) != 0) cur.fail("magic", "header", "magic " + bytes_repr(magic, 4) + " is not b'GGUF'");
  const uint64_t v = cur.uint(4, "header", "version");
  if (v != 2 && v != 3) {
    if ((v & 0xFFFF) == 0 && (v >> 24) >= 1 && (v >> 24) <= 3) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "0x%08x", static_cast<unsigned>(v));
      cur.fail("version", "header", std::string("version ") + buf + " looks big-endian; only little-endian files are supported (allowed 2..3)");
    }
    cur.fail("version", "header", "version " + std::to_string(v) + (v == 1 ? " (GGUF v1 uses 32-bit counts)" : "") +
                                      " is not supported (allowed 2..3)");
  }
  version_ = static_cast<uint32_t>(v);
  const uint64_t n_tensors = cur.uint(8, "header", "tensor count");
  const uint64_t n_kv = cur.uint(8, "header", "metadata count");
  if (n_kv > cur.left() / kMinKvBytes)
    cur.fail("kv_count", "header", "metadata count " + std::to_string(n_kv) + " cannot fit in the " + std::to_string(cur.left()) +
                                       " bytes left (allowed 0.." + std::to_string(cur.left() / kMinKvBytes) + ")");
  if (n_tensors > cur.left() / kMinTensorInfoBytes)
    cur.fail("tensor_count", "header", "tensor count " + std::to_string(n_tensors) + " cannot fit in the " +
                                           std::to_string(cur.left()) + " bytes left (allowed 0.." +
                                           std::to_string(cur.left() / kMinTensorInfoBytes) + ")");
  std::map<std::string, uint64_t> first_key;
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string obj = "key #" + std::to_string(i);
    std::string key = cur.string(obj, "key");
    if (key.empty()) cur.fail("key_empty", obj, "empty key (allowed 1..65535 bytes)");
    if (key.size() > kMaxKeyBytes)
      cur.fail("key_length", obj, "key is " + std::to_string(key.size()) + " bytes (allowed 1.." + std::to_string(kMaxKeyBytes) + ")");
    if (!valid_utf8(key)) cur.fail("key_utf8", obj, "key is not valid UTF-8");
    obj += " " + quote_name(key);
    if (auto it = first_key.find(key); it != first_key.end())
      cur.fail("duplicate_key", obj, "duplicate of key #" + std::to_string(it->second) + " (keys must be unique)");
    first_key[key] = i;
    const uint64_t vt = cur.uint(4, obj, "value type");
    if (vt > static_cast<uint64_t>(GgufValueType::F64)) cur.fail("value_type", obj, "value type " + std::to_string(vt) + " (allowed 0..12)");
    GgufValue val;
    if (vt == static_cast<uint64_t>(GgufValueType::ARRAY)) read_array(cur, obj, val);
    else read_scalar(cur, static_cast<GgufValueType>(vt), obj, val);
    kv_.emplace(std::move(key), std::move(val));
  }
  if (const GgufValue* a = find_value("general.alignment")) {
    if (a->type != GgufValueType::U32)
      cur.fail("alignment_type", "general.alignment", std::string("type ") + gguf_value_type_name(a->type) + " (allowed UINT32)");
    if (a->u == 0 || (a->u & (a->u - 1)))
      cur.fail("alignment", "general.alignment", std::to_string(a->u) + " is not a power of two (allowed 1, 2, 4, ..., 2^31)");
    alignment_ = static_cast<uint32_t>(a->u);
  }
  std::map<std::string, uint64_t> names;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    std::string obj = "tensor #" + std::to_string(i);
    std::string name = cur.string(obj, "name");
    if (name.empty() || name.size() > kMaxNameBytes)
      cur.fail("tensor_name", obj, "name is " + std::to_string(name.size()) + " bytes (allowed 1.." + std::to_string(kMaxNameBytes) + ")");
    if (!valid_utf8(name)) cur.fail("tensor_name", obj, "name is not valid UTF-8");
    obj += " " + quote_name(name);
    if (auto it = names.find(name); it != names.end())
      cur.fail("duplicate_tensor", obj, "duplicate of tensor #" + std::to_string(it->second) + " (names must be unique)");
    names[name] = i;
    const uint64_t nd = cur.uint(4, obj, "n_dims");
    if (nd < 1 || nd > 4) cur.fail("n_dims", obj, "n_dims " + std::to_string(nd) + " (allowed 1..4)");
    std::vector<uint64_t> dims;
    uint64_t count = 1;
    for (uint64_t j = 0; j < nd; ++j) {
      const uint64_t d = cur.uint(8, obj, "dimension " + std::to_string(j));
      if (d < 1 || d > kInt64Max)
        cur.fail("dim", obj, "dimension " + std::to_string(j) + " is " + std::to_string(d) + " (allowed 1.." + std::to_string(kInt64Max) + ")");
      dims.push_back(d);
      if (count > kInt64Max / d)
        cur.fail("element_count", obj, "dimensions " + dims_text(dims) + "... multiply past 2^63-1 (allowed element count 1.." +
                                           std::to_string(kInt64Max) + ")");
      count *= d;
    }
    const uint64_t tt = cur.uint(4, obj, "type");
    const GgmlTypeInfo* info = tt < kTypeCount ? ggml_type_info(static_cast<uint32_t>(tt)) : nullptr;
    if (!info) cur.fail("tensor_type", obj, "type " + std::to_string(tt) + " is unknown (allowed " + allowed_types_text() + ")");
    const uint64_t blk = static_cast<uint64_t>(info->block), tsize = static_cast<uint64_t>(info->type_size);
    if (dims[0] % blk)
      cur.fail("block_size", obj, "dimension 0 (" + std::to_string(dims[0]) + ") is not a multiple of the " + info->name +
                                      " block size " + std::to_string(blk));
    if (count / blk > kInt64Max / tsize)
      cur.fail("byte_size", obj, std::to_string(count) + " " + info->name + " elements need more than 2^63-1 bytes");
    GgufTensor t;
    t.offset = cur.uint(8, obj, "offset");
    t.name = std::move(name);
    t.type = static_cast<uint32_t>(tt);
    for (uint64_t d : dims) t.ne.push_back(static_cast<int64_t>(d));
    t.nbytes = count / blk * tsize;
    t.file = path_;
    t.index = static_cast<int>(i);
    tensors_.push_back(std::move(t));
  }
  const uint64_t pad = (alignment_ - cur.pos() % alignment_) % alignment_;
  data_start_ = cur.pos() + pad;
  if (!tensors_.empty() && data_start_ > size)
    cur.fail("data_start", "data section", "would start at " + std::to_string(data_start_) + " (after " + std::to_string(pad) +
                                               " bytes of padding), past the end of the file (size " + std::to_string(size) + ")");
  const uint64_t room = size >= data_start_ ? size - data_start_ : 0;
  for (const GgufTensor& t : tensors_) {
    const std::string obj = "tensor #" + std::to_string(t.index) + " " + quote_name(t.name);
    if (t.offset % alignment_)
      cur.fail("offset_alignment", obj, "offset " + std::to_string(t.offset) + " is not a multiple of the alignment " + std::to_string(alignment_));
    if (t.offset > room || t.nbytes > room - t.offset)
      cur.fail("offset_range", obj, "data [" + std::to_string(t.offset) + ", " +
                                        u128(static_cast<unsigned __int128>(t.offset) + t.nbytes) +
                                        ") runs past the end of the data section (allowed end <= " + std::to_string(room) + ")");
  }
  std::vector<const GgufTensor*> order;
  for (const GgufTensor& t : tensors_) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(), [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const GgufTensor& p = *order[k - 1];
    const GgufTensor& t = *order[k];
    if (t.offset < p.offset + p.nbytes)
      cur.fail("overlap", "tensor #" + std::to_string(t.index) + " " + quote_name(t.name),
               "data [" + std::to_string(t.offset) + ", " + std::to_string(t.offset + t.nbytes) + ") overlaps tensor " +
                   quote_name(p.name) + " [" + std::to_string(p.offset) + ", " + std::to_string(p.offset + p.nbytes) + ")");
  }
  for (size_t k = 0; k < tensors_.size(); ++k) {
    tensors_[k].data = bytes + data_start_ + tensors_[k].offset;
    index_[tensors_[k].name] = k;
  }
}

const GgufValue* GgufFile::find_value(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

const GgufTensor* GgufFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

bool is_gguf_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  char m[4] = {};
  const bool ok = ::pread(fd, m, 4, 0) == 4 && std::memcmp(m, "GGUF", 4) == 0;
  ::close(fd);
  return ok;
}

}  // namespace hl
