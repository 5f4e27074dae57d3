// libFuzzer target for GGUF files (issue 19): the input is one GGUF file. It is checked by the
// reader (engine/io/gguf.cpp); what passes has every tensor's data checked to lie in the input
// and, for the types HybridLens computes with, dequantised row by row (core/ggml_quant.h); then the
// tokenizer is built from its tokenizer.ggml.* metadata (tokenizer/gguf_tokenizer.h) and, when one
// results, encodes and decodes a few hard strings; then a file with an architecture and tensors
// goes through the config and tensor mapping (io/gguf_import.h, import_gguf_files of the bytes in
// memory) and every op it makes is widened in memory as materialize() would from disk.
// Bad input throws hl::Error (LoadError from the readers); anything else is a finding. Not the
// split across shards (gguf_split.cpp needs files on disk): the corruption table covers those.
// HL_FUZZ_VERBOSE=1 prints each refused input's message (to see why a seed stops where it does).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/ggml_quant.h"
#include "engine/io/gguf.h"
#include "engine/io/gguf_import.h"
#include "engine/tokenizer/gguf_tokenizer.h"
#include "engine/tokenizer/tokenizer.h"

namespace {

constexpr int64_t kMaxWidenedBytes = int64_t{1} << 20;  // dequantise tensors (and ops) up to 1 MiB of F32

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_gguf: invariant broken: %s\n", what);
    std::abort();
  }
}

bool verbose() {
  static const bool v = std::getenv("HL_FUZZ_VERBOSE") != nullptr;
  return v;
}

void refused(const char* stage, const hl::Error& e) {
  if (verbose()) std::fprintf(stderr, "fuzz_gguf: %s: %s\n", stage, e.what());
}

// rows of n0 elements of t, from `first_row`, into out (resized); errors here are findings.
void widen(const hl::GgufTensor& t, int64_t first_row, int64_t rows, std::vector<float>& out) {
  const int64_t n0 = t.ne[0];
  const int64_t row_bytes = hl::ggml_row_bytes(t.type, n0);
  check(row_bytes > 0, "a dequantisable tensor has a row size");
  out.resize(static_cast<size_t>(rows * n0));
  const uint8_t* base = t.data + static_cast<uint64_t>(first_row) * static_cast<uint64_t>(row_bytes);
  for (int64_t r = 0; r < rows; ++r)
    hl::ggml_dequantize_row(t.type, base + r * row_bytes, out.data() + r * n0, n0);
}

// Every tensor lies in the input; those of a computable type and at most 1 MiB widened dequantise.
void walk_tensors(const hl::GgufFile& f, const uint8_t* data, size_t size) {
  const uint8_t* end = data + size;
  std::vector<float> out;
  for (const hl::GgufTensor& t : f.tensors()) {
    check(!t.ne.empty() && t.ne.size() <= 4, "1..4 dimensions");
    for (int64_t d : t.ne) check(d >= 1, "dimensions >= 1");
    check(t.data >= data && t.data <= end && t.nbytes <= static_cast<uint64_t>(end - t.data), "tensor data inside the input");
    check(f.find(t.name) == &t, "find() returns the tensor");
    if (!hl::ggml_can_dequantize(t.type)) continue;
    const int64_t n = t.numel();
    const int64_t rows = n / t.ne[0];
    check(static_cast<uint64_t>(hl::ggml_row_bytes(t.type, t.ne[0])) * static_cast<uint64_t>(rows) == t.nbytes,
          "nbytes = rows x row bytes");
    if (n > kMaxWidenedBytes / 4) continue;
    widen(t, 0, rows, out);
  }
}

void use_tokenizer(const hl::GgufFile& f) {
  std::unique_ptr<hl::GgufTokenizer> tok;
  try {
    tok = hl::tokenizer_from_gguf(f);
  } catch (const hl::Error& e) {
    refused("tokenizer", e);
    return;
  }
  if (!tok) return;
  const int64_t V = tok->vocab_size();
  check(V >= 1, "a vocabulary has tokens");
  try {
    for (const char* text : {"Hello world, it's 123 \xC3\xA9 e\xCC\x81 \xE2\x96\x81x  \t\n\r\n<s></s>",
                             "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9 \xE4\xB8\xAD\xE6\x96\x87 \xFF\xFE bad",
                             "aaaaaaaaaaaaaaaaaaaaaaaa 1234567 !!?? <unk> <0x41> \xC4\xA0"}) {
      for (bool special : {false, true}) {
        const std::vector<int32_t> ids = special ? tok->encode_special(text) : tok->encode(text);
        for (int32_t id : ids) check(id >= 0 && id < V, "encoded ids in 0..V-1");
        (void)tok->decode(ids);
        check(hl::display_pieces(*tok, ids).size() == ids.size(), "one shown piece per id");
      }
    }
    std::vector<int32_t> all;
    for (int64_t i = 0; i < V && i < 300; ++i) all.push_back(static_cast<int32_t>(i));
    all.push_back(-1);
    all.push_back(static_cast<int32_t>(V));
    (void)tok->decode(all);
    (void)hl::display_pieces(*tok, all);
  } catch (const hl::Error& e) {
    refused("tokenizer use", e);
  }
}

// The config and tensor mapping, then every op widened from memory (what materialize() reads from
// disk), its rows checked to lie in its source tensor.
void use_import(const std::shared_ptr<const hl::GgufModelFiles>& files) {
  std::shared_ptr<hl::GgufImport> im;
  try {
    im = hl::import_gguf_files(files);
  } catch (const hl::Error& e) {
    refused("import", e);
    return;
  }
  check(im->ops.size() == im->tensors.size(), "one state-dict tensor per op");
  check(im->buffer != nullptr, "a buffer");
  std::vector<float> out;
  for (size_t k = 0; k < im->ops.size(); ++k) {
    const hl::GgufImportOp& op = im->ops[k];
    check(op.src != nullptr && files->find(op.src->name) == op.src, "op source is a tensor of the file");
    const int64_t n0 = op.src->ne[0];
    const int64_t src_rows = op.src->numel() / n0;
    check(op.first_row >= 0 && op.rows >= 0 && op.rows <= src_rows - op.first_row, "op rows inside the source tensor");
    const hl::TensorInfo& t = im->tensors[k];
    // A matrix of whole stored rows keeps its stored type (F16, BF16, a block format); the rest is F32.
    check(t.end >= t.begin && t.end <= im->buffer->size() &&
              t.end - t.begin == static_cast<uint64_t>(hl::dtype_row_bytes(t.dtype, op.rows * n0)),
          "state-dict tensor inside the buffer");
    if (op.rows * n0 > kMaxWidenedBytes / 4) continue;
    widen(*op.src, op.first_row, op.rows, out);
  }
}

}  // namespace

// The architectures register themselves (engine/core/registry.h): a link that dropped them would
// refuse every model as "not supported" and fuzz nothing past the config.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  check(!hl::gguf_supported_architectures().empty(), "the GGUF architectures are linked in");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::shared_ptr<const hl::GgufModelFiles> files;
  try {
    files = std::make_shared<const hl::GgufModelFiles>(hl::GgufModelFiles::from_file(hl::GgufFile::parse(data, size, "fuzz.gguf")));
  } catch (const hl::Error& e) {
    refused("parse", e);
    return 0;
  }
  const hl::GgufFile& f = files->first();
  walk_tensors(f, data, size);
  use_tokenizer(f);
  // A vocabulary-only file (no tensors) names an architecture without being a model.
  if (f.find_value("general.architecture") && !f.tensors().empty()) use_import(files);
  return 0;
}
