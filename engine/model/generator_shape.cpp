// Shape-only checkpoints (generator.h generate_shape_only): the safetensors header of the planned
// tensors, laid end to end in plan order, and a data section left as a hole.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/io/atomic_file.h"
#include "engine/io/config.h"
#include "engine/model/generator.h"

namespace hl {

void generate_shape_only(const std::string& out_dir, const GenerateOptions& opts) {
  namespace fs = std::filesystem;
  if (out_dir.empty()) throw Error("generate: no output folder given");
  if (opts.mixed_dtypes || opts.shards > 1) throw Error("generate: a shape-only checkpoint has one dtype and one file");
  GenerateOptions o = opts;
  o.shards = 1;
  const std::vector<PlannedTensor> plan = plan_checkpoint(o);
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = {{"format", "pt"}, {"hybridlens_shape_only", "true"}};
  uint64_t at = 0;
  for (const PlannedTensor& t : plan) {
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {at, at + t.nbytes()}}};
    at += t.nbytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (!fs::is_directory(out_dir)) throw Error("generate: cannot create output folder '" + out_dir + "'");
  const std::string path = (fs::path(out_dir) / "model.safetensors").string();
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    const uint64_t n = text.size();
    f.write(reinterpret_cast<const char*>(&n), 8);  // little-endian hosts only (as the reader)
    f.write(text.data(), static_cast<std::streamsize>(text.size()));
    if (!f) throw Error("generate: cannot write '" + path + "'");
  }
  fs::resize_file(path, 8 + text.size() + at, ec);  // the hole
  if (ec) throw Error("generate: cannot size '" + path + "': " + ec.message());
  const std::string config = config_to_json(generated_config(o));
  write_file_atomic((fs::path(out_dir) / "config.json").string(), config.data(), config.size());
}

}  // namespace hl
