// hl-generate: writes a random-weight Jamba checkpoint folder (config.json + safetensors) from a
// preset or a config.json, with overrides. A thin command line over engine/model/generator.h; the
// app's `hybridlens generate` calls the same engine function. Errors: one line on stderr, exit 1.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>

#include "engine/core/error.h"
#include "engine/io/config.h"
#include "engine/model/generator.h"

namespace {

const char* kUsage =
    "usage: hl-generate --out DIR (--preset NAME | --config FILE.json) [options]\n"
    "Writes a random-weight checkpoint in HF's format: config.json and model.safetensors (or shards + index).\n"
    "  --out DIR             output folder (created if missing)\n"
    "  --preset NAME         Jamba: tiny | tiny-dev | demo-random | 3b | jamba-v0.1; bamba-tiny | nemotron-h-tiny |\n"
    "                        nemotron-h-moe-tiny | granite-h-tiny | falcon-h1-tiny\n"
    "  --config FILE.json    start from a Jamba config.json instead of a preset\n"
    "  --dtype T             bf16 (default) | f16 | f32 | mixed (per tensor, by name hash)\n"
    "  --shards N            N > 1 writes model-0000k-of-0000N.safetensors + model.safetensors.index.json\n"
    "  --seed S              random seed (default 0); same seed, same bytes\n"
    "  --fused-experts       write experts.gate_up_proj / experts.down_proj (transformers v5 names)\n"
    "  --registers R         write R trained register tokens (model.register_tokens)\n"
    "  --sinks               write self_attn.sinks on every attention layer\n"
    "  --tie-embeddings      tie_word_embeddings: true (lm_head.weight omitted)\n"
    "  --keep-lm-head        with tied embeddings, still write lm_head.weight (a copy)\n"
    "  --shape-only          no values: the header and a sparse data section (for `info --weights` on\n"
    "                        models too large to generate, e.g. --preset jamba-v0.1)\n"
    "  --vocab V --layers L --hidden H   override the config's sizes\n"
    "  -h, --help            this text\n";

int64_t parse_int(const std::string& opt, const std::string& v, int64_t lo, int64_t hi) {
  if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos)
    throw hl::Error(opt + " '" + v + "': not a non-negative integer");
  uint64_t x = 0;
  for (char c : v) {
    if (x > (UINT64_MAX - 9) / 10) throw hl::Error(opt + " '" + v + "': too large");
    x = x * 10 + static_cast<uint64_t>(c - '0');
  }
  if (x < static_cast<uint64_t>(lo) || x > static_cast<uint64_t>(hi))
    throw hl::Error(opt + " " + v + ": allowed " + std::to_string(lo) + ".." + std::to_string(hi));
  return static_cast<int64_t>(x);
}

uint64_t parse_u64(const std::string& opt, const std::string& v) {
  if (v.empty() || v.size() > 20 || v.find_first_not_of("0123456789") != std::string::npos)
    throw hl::Error(opt + " '" + v + "': not a non-negative integer");
  unsigned __int128 x = 0;
  for (char c : v) x = x * 10 + static_cast<unsigned>(c - '0');
  if (x > UINT64_MAX) throw hl::Error(opt + " '" + v + "': larger than 2^64-1");
  return static_cast<uint64_t>(x);
}

int run(int argc, char** argv) {
  std::string out, preset, config_path, dtype = "bf16";
  std::optional<int64_t> shards, registers, vocab, layers, hidden;
  uint64_t seed = 0;
  bool fused = false, sinks = false, tie = false, keep_head = false, shape_only = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], value;
    bool has_inline = false;
    if (a.rfind("--", 0) == 0 && a.find('=') != std::string::npos) {
      value = a.substr(a.find('=') + 1);
      a = a.substr(0, a.find('='));
      has_inline = true;
    }
    auto val = [&]() -> std::string {
      if (has_inline) return value;
      if (i + 1 >= argc) throw hl::Error(a + ": missing value");
      return argv[++i];
    };
    auto flag = [&]() {
      if (has_inline) throw hl::Error(a + " takes no value");
    };
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--out")
      out = val();
    else if (a == "--preset")
      preset = val();
    else if (a == "--config")
      config_path = val();
    else if (a == "--dtype")
      dtype = val();
    else if (a == "--shards")
      shards = parse_int(a, val(), 1, 99999);
    else if (a == "--seed")
      seed = parse_u64(a, val());
    else if (a == "--registers")
      registers = parse_int(a, val(), 0, 1 << 20);
    else if (a == "--vocab")
      vocab = parse_int(a, val(), 1, INT32_MAX);
    else if (a == "--layers")
      layers = parse_int(a, val(), 1, 4096);
    else if (a == "--hidden")
      hidden = parse_int(a, val(), 1, 1 << 20);
    else if (a == "--fused-experts")
      flag(), fused = true;
    else if (a == "--sinks")
      flag(), sinks = true;
    else if (a == "--tie-embeddings")
      flag(), tie = true;
    else if (a == "--keep-lm-head")
      flag(), keep_head = true;
    else if (a == "--shape-only")
      flag(), shape_only = true;
    else
      throw hl::Error("unknown option '" + a + "' (see --help)");
  }
  if (out.empty()) throw hl::Error("--out DIR is required (see --help)");
  if (preset.empty() == config_path.empty()) throw hl::Error("give exactly one of --preset NAME or --config FILE.json");

  hl::GenerateOptions o;
  o.config = preset.empty() ? hl::load_config_file(config_path) : hl::preset_config(preset);
  o.trained_registers = static_cast<int>(registers ? *registers : o.config.num_register_tokens);
  if (vocab) o.config.vocab_size = *vocab;
  if (layers) o.config.num_hidden_layers = *layers;
  if (hidden) o.config.hidden_size = *hidden;
  if (tie) o.config.tie_word_embeddings = true;
  o.omit_lm_head_when_tied = !keep_head;
  o.seed = seed;
  o.fused_experts = fused;
  o.sinks = sinks;
  o.shards = static_cast<int>(shards ? *shards : 1);
  if (dtype == "bf16")
    o.dtype = hl::DType::BF16;
  else if (dtype == "f16")
    o.dtype = hl::DType::F16;
  else if (dtype == "f32")
    o.dtype = hl::DType::F32;
  else if (dtype == "mixed")
    o.mixed_dtypes = true;
  else
    throw hl::Error("--dtype '" + dtype + "': allowed bf16, f16, f32, mixed");

  const auto plan = hl::plan_checkpoint(o);
  int64_t params = 0;
  uint64_t bytes = 0;
  for (const auto& t : plan) {
    params += t.numel();
    bytes += t.nbytes();
  }
  if (shape_only) {
    hl::generate_shape_only(out, o);
    std::printf("%s: %zu tensors, %lld parameters, %.1f MB as stored, shape only (a sparse file without values)\n",
                out.c_str(), plan.size(), static_cast<long long>(params), double(bytes) / 1e6);
    return 0;
  }
  hl::generate_checkpoint(out, o);
  std::printf("%s: %zu tensors, %lld parameters, %.1f MB in %d file(s)\n", out.c_str(), plan.size(),
              static_cast<long long>(params), double(bytes) / 1e6, o.shards);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::string m = e.what();
    if (m.rfind("generate: ", 0) == 0) m = m.substr(10);  // the engine's own prefix
    std::fprintf(stderr, "hl-generate: %s\n", m.c_str());
    return 1;
  }
}
