// safetensors writer (checkpoint generator, trace files, tests); files are written with
// write_file_atomic (atomic_file.h). Not the reader: safetensors.cpp. Layout follows huggingface/safetensors
// serialize(): header padded with spaces to 8 bytes, tensors ordered by decreasing alignment.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <numeric>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/io/safetensors.h"

namespace hl {

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) {
  metadata_[key] = value;
}

void SafetensorsWriter::add(const std::string& name, DType dtype, const std::vector<int64_t>& shape, const void* data,
                            size_t nbytes) {
  if (name == "__metadata__") throw Error("safetensors writer: '__metadata__' is not a valid tensor name");
  for (const Entry& e : entries_) {
    if (e.name == name) throw Error("safetensors writer: duplicate tensor name '" + name + "'");
  }
  if (static_cast<int>(shape.size()) > SafetensorsFile::kMaxRank) {
    throw Error("safetensors writer: tensor '" + name + "': rank " + std::to_string(shape.size()) + " exceeds 8");
  }
  uint64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel)) {
      throw Error("safetensors writer: tensor '" + name + "': invalid shape " + shape_to_string(shape));
    }
  }
  if (numel * dtype_size(dtype) != nbytes) {
    throw Error("safetensors writer: tensor '" + name + "': shape " + shape_to_string(shape) + " of " +
                dtype_name(dtype) + " needs " + std::to_string(numel * dtype_size(dtype)) + " bytes, got " +
                std::to_string(nbytes));
  }
  Entry e{name, dtype, shape, {}};
  const uint8_t* p = static_cast<const uint8_t*>(data);
  e.bytes.assign(p, p + nbytes);
  entries_.push_back(std::move(e));
}

void SafetensorsWriter::add_float(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                                  const float* data) {
  if (dtype != DType::F32 && dtype != DType::F16 && dtype != DType::BF16) {
    throw Error("safetensors writer: tensor '" + name + "': add_float needs F32, F16 or BF16, got " +
                dtype_name(dtype));
  }
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) throw Error("safetensors writer: tensor '" + name + "': invalid shape " + shape_to_string(shape));
    numel *= d;
  }
  std::vector<uint8_t> buf(static_cast<size_t>(numel) * dtype_size(dtype));
  from_float(dtype, data, buf.data(), static_cast<size_t>(numel));
  add(name, dtype, shape, buf.data(), buf.size());
}

std::vector<uint8_t> SafetensorsWriter::serialize() const {
  std::vector<size_t> order(entries_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return dtype_size(entries_[a].dtype) > dtype_size(entries_[b].dtype); });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata_) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  uint64_t offset = 0;
  for (size_t i : order) {
    const Entry& e = entries_[i];
    nlohmann::ordered_json t = nlohmann::ordered_json::object();
    t["dtype"] = dtype_name(e.dtype);
    t["shape"] = e.shape;
    t["data_offsets"] = {offset, offset + e.bytes.size()};
    header[e.name] = std::move(t);
    offset += e.bytes.size();
  }
  std::string text = header.dump();  // UTF-8 names stay as written; control characters are escaped
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  std::vector<uint8_t> out(8 + text.size() + offset);
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  std::memcpy(out.data() + 8, text.data(), text.size());
  uint8_t* dst = out.data() + 8 + text.size();
  for (size_t i : order) {
    const Entry& e = entries_[i];
    if (!e.bytes.empty()) std::memcpy(dst, e.bytes.data(), e.bytes.size());
    dst += e.bytes.size();
  }
  return out;
}

void SafetensorsWriter::write(const std::string& path) const {
  std::vector<uint8_t> bytes = serialize();
  write_file_atomic(path, bytes.data(), bytes.size());
}

}  // namespace hl
