// safetensors reader: read-only mmap of the file (or, for checkpoint weights, anonymous memory
// filled by pread: MappedFile::open_read says why), then every check of reliability-checklist.md on
// the header (streamed through a SAX handler, so a hostile header cannot build a huge DOM).
// Reference: huggingface/safetensors safetensors/src/tensor.rs (validate, Metadata). Writer: safetensors_writer.cpp.
#include "engine/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "engine/core/anon_buffer.h"
#include "engine/core/error.h"
#include "engine/io/file_check.h"
#include "engine/io/json_util.h"

namespace hl {

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

std::string base_name(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // validated against overflow at open
  return n;
}

// ---------------------------------------------------------------------------------------------
// MappedFile

namespace {

// An open regular, non-empty file and its stat; throws LoadError naming the path.
int open_regular(const std::string& path, struct stat* st) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO must not block the open
  if (fd < 0) throw LoadError(path + ": cannot open: " + std::strerror(errno));
  std::string why;
  if (::fstat(fd, st) != 0)
    why = std::string("cannot stat: ") + std::strerror(errno);
  else if (S_ISDIR(st->st_mode))
    why = "is a folder, expected a file";
  else if (!S_ISREG(st->st_mode))
    why = "is not a regular file (a FIFO, a device or a socket)";
  else if (st->st_size == 0)
    why = "empty file (0 bytes)";
  if (!why.empty()) {
    ::close(fd);
    throw LoadError(path + ": " + why);
  }
  return fd;
}

}  // namespace

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path) {
  struct stat st;
  int fd = open_regular(path, &st);
  void* p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  ::close(fd);  // the mapping keeps its own reference
  if (p == MAP_FAILED) throw LoadError(path + ": cannot map: " + std::strerror(err));
  std::shared_ptr<MappedFile> m(new MappedFile());
  m->data_ = static_cast<uint8_t*>(p);
  m->size_ = static_cast<uint64_t>(st.st_size);
  m->path_ = path;
  m->stamp_ = FileStamp::of(path, st);
  m->read_bytes_ = m->size_;
  return m;
}

// Why Read exists (issue 18 item 3): a file-backed mapping faults (SIGBUS) when a page beyond a
// truncated end is touched, and MAP_PRIVATE does not help (pages not yet copied still come from the
// file). A SIGBUS handler that longjmps out of a registered range is unsafe with the thread pool
// and the device backends' host copies. So the weights live in anonymous memory the process owns:
// a later change of the file cannot reach them, and the file's stamp lets a run say "changed on
// disk" instead of mixing weights. Costs: one pread pass at load (page-cache speed, a few GB/s),
// and the weights count as anonymous rather than file-backed resident memory (the CPU backend
// touches every weight each step, so it was resident either way; see README "Reliability").
std::shared_ptr<MappedFile> MappedFile::open_read(const std::string& path) {
  struct stat st;
  int fd = open_regular(path, &st);
  const size_t n = static_cast<size_t>(st.st_size);
  uint8_t* p = map_anonymous(n);  // huge pages where offered (anon_buffer.h), before pread fills it
  if (!p) {
    int err = errno;
    ::close(fd);
    throw LoadError(path + ": cannot reserve " + std::to_string(n) + " bytes of memory: " + std::strerror(err));
  }
  std::shared_ptr<MappedFile> m(new MappedFile());
  m->data_ = p;
  m->size_ = static_cast<uint64_t>(st.st_size);
  m->path_ = path;
  m->stamp_ = FileStamp::of(path, st);
  m->fd_ = fd;
  // The length and the header; parse() reads nothing else.
  auto read_upto = [&](uint64_t end) {
    while (m->read_bytes_ < end) {
      const ssize_t got = ::pread(fd, m->data_ + m->read_bytes_, static_cast<size_t>(end - m->read_bytes_),
                                  static_cast<off_t>(m->read_bytes_));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) throw LoadError(path + ": cannot read: " + std::strerror(errno));
      if (got == 0)
        throw LoadError(path + ": changed on disk while loading (ends at byte " + std::to_string(m->read_bytes_) +
                        ", " + std::to_string(m->size_) + " expected)");
      m->read_bytes_ += static_cast<uint64_t>(got);
    }
  };
  read_upto(std::min<uint64_t>(8, m->size_));
  if (m->size_ >= 8) {
    uint64_t hdr = 0;
    for (int i = 7; i >= 0; --i) hdr = hdr << 8 | m->data_[i];
    read_upto(std::min<uint64_t>(m->size_, 8 + std::min<uint64_t>(hdr, SafetensorsFile::kMaxHeaderBytes)));
  }
  return m;
}

void MappedFile::read_rest() const {
  if (fd_ < 0) return;
  constexpr uint64_t kChunk = uint64_t{64} << 20;  // bounded syscalls, EINTR-friendly
  std::string why;
  while (read_bytes_ < size_ && why.empty()) {
    const uint64_t want = std::min(kChunk, size_ - read_bytes_);
    const ssize_t got = ::pread(fd_, data_ + read_bytes_, static_cast<size_t>(want), static_cast<off_t>(read_bytes_));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0)
      why = std::string("cannot read: ") + std::strerror(errno);
    else if (got == 0)
      why = "changed on disk while loading (ends at byte " + std::to_string(read_bytes_) + ", " +
            std::to_string(size_) + " expected)";
    else
      read_bytes_ += static_cast<uint64_t>(got);
  }
  struct stat st {};
  if (why.empty() && ::fstat(fd_, &st) == 0 && !FileStamp::of(path_, st).same_as(stamp_))
    why = "changed on disk while loading (size or modification time differ from when it was opened)";
  ::close(fd_);
  fd_ = -1;
  if (!why.empty()) throw LoadError(path_ + ": " + why);
}

MappedFile::~MappedFile() {
  if (fd_ >= 0) ::close(fd_);
  if (data_) ::munmap(data_, static_cast<size_t>(size_));
}

// ---------------------------------------------------------------------------------------------
// Header parsing

namespace {

constexpr int kMaxDepth = 4;  // reliability-checklist.md: nesting depth <= 4

struct RawTensor {
  std::string name;
  std::string dtype;
  bool has_dtype = false, has_shape = false, has_offsets = false;
  std::vector<int64_t> shape;     // at most kMaxRank + 1 stored
  std::vector<uint64_t> offsets;  // at most 3 stored
  size_t shape_len = 0, offsets_len = 0;
};

// Streams the header JSON. Structural problems (depth) stop the parse at once; semantic problems are
// remembered (the first one wins) and the parse continues, so invalid JSON is always reported as such.
class HeaderSax {
 public:
  std::string fatal;  // depth exceeded
  std::string error;  // first semantic error
  std::vector<RawTensor> tensors;
  std::map<std::string, std::string> metadata;

  bool null() {
    if (depth_ == 1 && top_object_ && pending_metadata_) return true;  // "__metadata__": null (Rust Option)
    return scalar("null");
  }
  bool boolean(bool) { return scalar("a boolean"); }
  bool number_integer(int64_t v) {
    if (v >= 0) return number_unsigned(static_cast<uint64_t>(v));
    if (depth_ == 3 && in_tensor_ && (field_ == Field::Shape || field_ == Field::Offsets)) {
      fail(tensor_ctx() + "field '" + field_name() + "' holds the negative value " + std::to_string(v) +
           " (must be a non-negative integer)");
      return true;
    }
    return scalar("a number");
  }
  bool number_unsigned(uint64_t v) {
    if (depth_ == 3 && !tensors.empty() && in_tensor_) {
      RawTensor& t = tensors.back();
      if (field_ == Field::Shape) {
        if (v > static_cast<uint64_t>(INT64_MAX)) {
          fail(tensor_ctx() + "shape dimension " + std::to_string(v) + " is too large");
        } else if (t.shape.size() <= static_cast<size_t>(SafetensorsFile::kMaxRank)) {
          t.shape.push_back(static_cast<int64_t>(v));
        }
        ++t.shape_len;
        return true;
      }
      if (field_ == Field::Offsets) {
        if (t.offsets.size() < 3) t.offsets.push_back(v);
        ++t.offsets_len;
        return true;
      }
    }
    return scalar("a number");
  }
  bool number_float(double, const std::string& s) {
    if (depth_ == 3 && in_tensor_ && (field_ == Field::Shape || field_ == Field::Offsets)) {
      fail(tensor_ctx() + "field '" + field_name() + "' holds " + s + " (must be a non-negative integer)");
      return true;
    }
    return scalar("a number");
  }
  bool string(std::string& v) {
    if (depth_ == 2 && in_metadata_) {
      metadata[meta_key_] = v;
      return true;
    }
    if (depth_ == 2 && in_tensor_ && field_ == Field::Dtype) {
      tensors.back().dtype = v;
      return true;
    }
    return scalar("a string");
  }
  bool binary(nlohmann::json::binary_t&) { return scalar("binary data"); }

  bool start_object(size_t) {
    if (!push()) return false;
    if (depth_ == 1) {
      top_object_ = true;
      return true;
    }
    if (depth_ == 2 && top_object_) {
      field_ = Field::None;
      if (pending_metadata_)
        in_metadata_ = true;
      else
        in_tensor_ = true;
      return true;
    }
    return container("an object");
  }
  bool end_object() {
    if (depth_ == 2 && in_tensor_) finish_tensor();
    if (depth_ == 2) {
      in_tensor_ = in_metadata_ = false;
      field_ = Field::None;
    }
    if (depth_ == 3) field_ = Field::None;
    --depth_;
    return true;
  }
  bool start_array(size_t) {
    if (!push()) return false;
    if (depth_ == 3 && in_tensor_ && (field_ == Field::Shape || field_ == Field::Offsets)) return true;
    return container("an array");
  }
  bool end_array() {
    if (depth_ == 3) field_ = Field::None;
    --depth_;
    return true;
  }

  bool key(std::string& k) {
    if (depth_ == 1) {
      pending_metadata_ = false;
      field_ = Field::None;
      if (k == "__metadata__") {
        if (seen_metadata_) fail("'__metadata__' appears twice");
        seen_metadata_ = true;
        pending_metadata_ = true;
        return true;
      }
      auto [it, inserted] = names_.emplace(k, tensors.size());
      if (!inserted) fail("duplicate tensor name " + quote_name(k) + " (each tensor must appear once)");
      tensors.emplace_back();
      tensors.back().name = k;
      return true;
    }
    if (depth_ == 2 && in_metadata_) {
      if (metadata.count(k)) fail("__metadata__: key " + quote_name(k) + " appears twice");
      meta_key_ = k;
      return true;
    }
    if (depth_ == 2 && in_tensor_) {
      RawTensor& t = tensors.back();
      bool* seen = nullptr;
      if (k == "dtype") {
        field_ = Field::Dtype;
        seen = &t.has_dtype;
      } else if (k == "shape") {
        field_ = Field::Shape;
        seen = &t.has_shape;
      } else if (k == "data_offsets") {
        field_ = Field::Offsets;
        seen = &t.has_offsets;
      } else {
        field_ = Field::None;
        fail(tensor_ctx() + "unknown field " + quote_name(k) + " (allowed: dtype, shape, data_offsets)");
        return true;
      }
      if (*seen) fail(tensor_ctx() + "field " + quote_name(k) + " appears twice");
      *seen = true;
      return true;
    }
    return true;  // inside a value that is already reported
  }

  bool parse_error(size_t pos, const std::string&, const nlohmann::json::exception& e) {
    syntax = "header is not valid JSON (at byte " + std::to_string(pos) + "): " + json_error_text(e);
    return false;
  }
  std::string syntax;

 private:
  enum class Field { None, Dtype, Shape, Offsets };

  bool push() {
    if (++depth_ > kMaxDepth) {
      fatal = "header JSON nesting depth exceeds " + std::to_string(kMaxDepth);
      return false;
    }
    return true;
  }
  void fail(const std::string& m) {
    if (error.empty()) error = m;
  }
  std::string tensor_ctx() const { return "tensor " + quote_name(tensors.back().name) + ": "; }
  const char* field_name() const {
    return field_ == Field::Dtype ? "dtype" : field_ == Field::Shape ? "shape" : "data_offsets";
  }
  // A scalar or container where the schema does not allow one; `what` is "a string", "an array"...
  bool wrong(const std::string& what) {
    if (!error.empty()) return true;  // only the first problem is reported
    if (depth_ == 0) {
      fail("header is not a JSON object (top level is " + what + ")");
    } else if (!top_object_) {
      return true;
    } else if (depth_ == 1) {
      if (pending_metadata_)
        fail("'__metadata__' must be an object of strings, got " + what);
      else
        fail(tensor_ctx() + "entry must be an object with dtype, shape, data_offsets; got " + what);
    } else if (depth_ == 2 && in_metadata_) {
      fail("__metadata__: value of " + quote_name(meta_key_) + " must be a string, got " + what);
    } else if (depth_ == 2 && in_tensor_ && field_ != Field::None) {
      fail(tensor_ctx() + "field '" + field_name() + "' must be " +
           (field_ == Field::Dtype ? "a string" : "an array of non-negative integers") + ", got " + what);
    } else if (depth_ == 3 && in_tensor_ && field_ != Field::None) {
      fail(tensor_ctx() + "field '" + field_name() + "' must hold non-negative integers, got " + what);
    }
    return true;
  }
  bool scalar(const std::string& what) { return wrong(what); }
  // Called after push(): the container's own depth is depth_, so judge it at depth_ - 1.
  bool container(const std::string& what) {
    --depth_;
    wrong(what);
    ++depth_;
    return true;
  }
  void finish_tensor() {
    RawTensor& t = tensors.back();
    if (!t.has_dtype) fail(tensor_ctx() + "missing field 'dtype'");
    if (!t.has_shape) fail(tensor_ctx() + "missing field 'shape'");
    if (!t.has_offsets) fail(tensor_ctx() + "missing field 'data_offsets'");
    if (t.has_shape && t.shape_len > static_cast<size_t>(SafetensorsFile::kMaxRank)) {
      fail(tensor_ctx() + "rank " + std::to_string(t.shape_len) + " exceeds the maximum of " +
           std::to_string(SafetensorsFile::kMaxRank));
    }
    if (t.has_offsets && t.offsets_len != 2) {
      fail(tensor_ctx() + "data_offsets must hold exactly 2 integers [begin, end], got " +
           std::to_string(t.offsets_len));
    }
  }

  int depth_ = 0;
  bool top_object_ = false;        // the top level is an object
  bool pending_metadata_ = false;  // the current top-level key is __metadata__
  bool seen_metadata_ = false;
  bool in_metadata_ = false, in_tensor_ = false;
  std::string meta_key_;
  Field field_ = Field::None;
  std::unordered_map<std::string, size_t> names_;
};

uint64_t read_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

std::string offsets_str(const TensorInfo& t) {
  std::string s = "[";  // built by appends: GCC 12 warns falsely (-Wrestrict) on "[" + to_string(...)
  s += std::to_string(t.begin);
  s += ", ";
  s += std::to_string(t.end);
  s += "]";
  return s;
}

}  // namespace

SafetensorsFile SafetensorsFile::parse(const uint8_t* bytes, uint64_t size, const std::string& name) {
  auto err = [&](const std::string& m) { return LoadError(name + ": " + m); };
  if (size < 8) {
    throw err("file is " + std::to_string(size) + " bytes, too short for the 8-byte header length (truncated?)");
  }
  uint64_t n = read_le64(bytes);
  if (n > kMaxHeaderBytes) {
    throw err("header length " + std::to_string(n) + " exceeds the limit of " + std::to_string(kMaxHeaderBytes) +
              " bytes");
  }
  uint64_t header_end = 0;
  if (__builtin_add_overflow(n, static_cast<uint64_t>(8), &header_end) || header_end > size) {
    throw err("header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(size) +
              " bytes; truncated?)");
  }
  const char* hdr = reinterpret_cast<const char*>(bytes + 8);
  size_t bad = find_invalid_utf8(hdr, static_cast<size_t>(n));
  if (bad != SIZE_MAX) {
    throw err("header is not valid UTF-8 (ill-formed byte sequence at header byte " + std::to_string(bad) + ")");
  }
  HeaderSax sax;
  bool ok = nlohmann::json::sax_parse(hdr, hdr + n, &sax);
  if (!sax.fatal.empty()) throw err(sax.fatal);
  if (!sax.syntax.empty()) throw err(sax.syntax);
  if (!ok) throw err("header is not valid JSON");
  if (!sax.error.empty()) throw err(sax.error);

  SafetensorsFile f;
  f.path_ = name;
  f.metadata_ = std::move(sax.metadata);
  f.data_start_ = header_end;
  const uint64_t data_size = size - header_end;
  std::vector<TensorInfo> ts;
  ts.reserve(sax.tensors.size());
  for (RawTensor& r : sax.tensors) {
    std::string ctx = "tensor " + quote_name(r.name) + ": ";
    auto dt = dtype_from_name(r.dtype);
    if (!dt)
      throw err(ctx + "dtype " + quote_name(r.dtype) + " is not supported (supported: F32, F16, BF16, I32, I64)");
    TensorInfo t;
    t.name = std::move(r.name);
    t.dtype = *dt;
    t.shape = std::move(r.shape);
    t.begin = r.offsets[0];
    t.end = r.offsets[1];
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel) || numel > static_cast<uint64_t>(INT64_MAX)) {
        throw err(ctx + "shape " + shape_to_string(t.shape) + " has too many elements (overflow)");
      }
    }
    uint64_t nbytes = 0;  // element sizes are whole bytes, so nbits % 8 == 0 always holds
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(t.dtype)), &nbytes)) {
      throw err(ctx + "shape " + shape_to_string(t.shape) + " of " + dtype_name(t.dtype) + " overflows the byte count");
    }
    if (t.end < t.begin) throw err(ctx + "data_offsets " + offsets_str(t) + " end before they begin");
    if (t.end - t.begin != nbytes) {
      throw err(ctx + "data_offsets " + offsets_str(t) + " hold " + std::to_string(t.end - t.begin) +
                " bytes, but shape " + shape_to_string(t.shape) + " of " + dtype_name(t.dtype) + " needs " +
                std::to_string(nbytes) + " bytes");
    }
    t.file = name;
    ts.push_back(std::move(t));
  }
  std::stable_sort(ts.begin(), ts.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t prev_end = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& t : ts) {
    std::string ctx = "tensor " + quote_name(t.name) + ": data_offsets " + offsets_str(t);
    if (t.begin < prev_end) {
      throw err(ctx + " overlap the previous tensor " + quote_name(prev->name) + " ending at " +
                std::to_string(prev_end));
    }
    if (t.begin > prev_end) {
      if (!prev) throw err(ctx + " leave a gap: the first tensor must begin at 0");
      throw err(ctx + " leave a gap of " + std::to_string(t.begin - prev_end) + " bytes after the previous tensor " +
                quote_name(prev->name) + " ending at " + std::to_string(prev_end));
    }
    if (t.end > data_size) {
      throw err(ctx + " run past the end of the data section (" + std::to_string(data_size) +
                " bytes): the file is truncated");
    }
    prev_end = t.end;
    prev = &t;
  }
  if (prev_end != data_size) {
    throw err(std::to_string(data_size - prev_end) + " trailing bytes after the last tensor (data section is " +
              std::to_string(data_size) + " bytes, tensors end at " + std::to_string(prev_end) + ")");
  }
  for (size_t i = 0; i < ts.size(); ++i) {
    ts[i].data = bytes + header_end + ts[i].begin;
    f.index_[ts[i].name] = i;
  }
  f.tensors_ = std::move(ts);
  return f;
}

SafetensorsFile SafetensorsFile::open(const std::string& path, FileAccess access) {
  std::shared_ptr<MappedFile> m = access == FileAccess::Read ? MappedFile::open_read(path) : MappedFile::open(path);
  SafetensorsFile f = parse(m->data(), m->size(), base_name(path));
  for (TensorInfo& t : f.tensors_) t.file = path;
  f.path_ = path;
  f.map_ = std::move(m);
  return f;
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace hl
