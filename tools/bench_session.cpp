// hl-bench-session: records a run of a checkpoint (default: a freshly generated demo-random model,
// 4096 tokens, every instrument incl. attention rows), saves it as a session, loads it back, and
// prints the size per tensor group and the save/load times. --write-corpus writes the fuzz seeds.
// Not a test: tests/engine/test_session.cpp checks correctness; this measures (issue 6).
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/io/safetensors.h"
#include "engine/model/generator.h"
#include "engine/model/loader.h"
#include "sessions/identity.h"
#include "sessions/recorder.h"
#include "sessions/session_file.h"

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
// CPU seconds of this thread (user + system): the load's own cost, whatever else the machine runs.
double thread_cpu() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

const char* kUsage =
    "usage: hl-bench-session [--checkpoint DIR] [--tokens N] [--ab] [--out FILE] [--logits-f16]\n"
    "       hl-bench-session --write-corpus DIR\n"
    "Records N tokens (default 4096) of DIR (default: a demo-random checkpoint generated in a temp\n"
    "folder) with every instrument, saves the session, loads it 3 times, prints size and times.\n"
    "  --ab           also record a run B (softmax1) over the same tokens\n"
    "  --out FILE     keep the session there (default: a temp file, removed)\n"
    "  --logits-f16   store the logits as F16 (default F32)\n"
    "  --write-corpus DIR  write the session fuzz seed corpus (valid and near-valid files) into DIR\n";

std::string temp_dir() {
  const char* base = std::getenv("TMPDIR");
  std::string t = std::string(base && *base ? base : "/tmp") + "/hl_bench_session_XXXXXX";
  std::vector<char> buf(t.begin(), t.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data())) throw hl::Error("cannot create a temporary folder under " + t);
  return buf.data();
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  if (!f) throw hl::Error(path + ": cannot write");
}

// The safetensors header text of a serialized file, and the file rebuilt around an edited header.
std::string header_of(const std::vector<uint8_t>& b) {
  uint64_t n = 0;
  std::memcpy(&n, b.data(), 8);
  return std::string(reinterpret_cast<const char*>(b.data()) + 8, n);
}
std::vector<uint8_t> with_header(const std::vector<uint8_t>& b, const std::string& header) {
  uint64_t old = 0;
  std::memcpy(&old, b.data(), 8);
  const uint64_t n = header.size(), rest = b.size() - 8 - old;
  std::vector<uint8_t> out(8 + n + rest);
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, header.data(), n);
  std::memcpy(out.data() + 8 + n, b.data() + 8 + old, rest);
  return out;
}
std::vector<uint8_t> edit(const std::vector<uint8_t>& b, const std::string& from, const std::string& to) {
  std::string h = header_of(b);
  const size_t at = h.find(from);
  if (at == std::string::npos) throw hl::Error("corpus: '" + from + "' not found in the header");
  h.replace(at, from.size(), to);
  return with_header(b, h);
}

// Seeds: a tiny model (V 64, 4 layers) recorded for 6 tokens; valid files and one-edit-away ones.
int write_corpus(const std::string& dir) {
  ::mkdir(dir.c_str(), 0755);
  const std::string ck = temp_dir();
  hl::GenerateOptions g;
  hl::JambaConfig& c = g.config;
  c = hl::preset_config("demo-random");
  c.vocab_size = 64;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.num_experts = 4;
  c.attn_layer_period = 4;
  c.attn_layer_offset = 1;
  c.mamba_d_state = 4;
  c.mamba_dt_rank_auto = true;
  c.mamba_dt_rank = 1;
  g.seed = 7;
  hl::generate_checkpoint(ck, g);
  std::shared_ptr<hl::Model> model = hl::load_model(ck);
  const hl::CheckpointIdentity id = hl::identify_checkpoint(ck);
  const std::vector<int32_t> tokens = {1, 5, 9, 17, 33, 60};
  auto run = [&](const std::string& label, hl::RunOptions o) {
    hl::RecordRequest r;
    r.prompt = tokens;
    r.options = o;
    r.backend = "cpu";
    r.label = label;
    return hl::record_run(model, r);
  };
  hl::RunOptions full;
  full.full = true;
  hl::RunOptions soft1 = full, reg2 = full, lean;
  soft1.normalizer_override = true;
  soft1.normalizer = hl::Normalizer::Softmax1;
  reg2.registers = 2;
  hl::Recording ab = hl::make_recording(*model, id, "", tokens, nullptr);
  ab.runs = {run("A", full), run("B", soft1)};
  hl::Recording regs = ab, nofull = ab, partial = ab;
  regs.runs = {run("A", reg2), run("B", full)};
  nofull.runs = {run("A", lean)};
  partial.runs = {run("A", full)};
  partial.runs[0].records.edit(1).attn_rows.clear();
  partial.runs[0].records.edit(3).attn_rows.clear();
  hl::SessionSaveOptions f16_logits, bf16_full;
  f16_logits.logits_dtype = hl::DType::F16;
  bf16_full.full_dtype = hl::DType::BF16;
  const std::vector<uint8_t> valid = hl::serialize_session(ab);
  std::map<std::string, std::vector<uint8_t>> files = {
      {"valid_ab.hlsession", valid},
      {"valid_registers.hlsession", hl::serialize_session(regs)},
      {"valid_nofull_f16logits.hlsession", hl::serialize_session(nofull, f16_logits)},
      {"valid_partial_bf16.hlsession", hl::serialize_session(partial, bf16_full)},
      {"bad_truncated.hlsession", std::vector<uint8_t>(valid.begin(), valid.end() - 37)},
      {"bad_version.hlsession", edit(valid, "\\\"format_version\\\":1", "\\\"format_version\\\":2")},
      {"bad_manifest_json.hlsession", edit(valid, "\\\"format\\\":", "\\\"format\\\"")},
      {"bad_absurd_tokens.hlsession", edit(valid, "\\\"n_tokens\\\":6", "\\\"n_tokens\\\":99999999999")},
      {"bad_shape_vs_config.hlsession", edit(valid, "\\\"vocab_size\\\":64", "\\\"vocab_size\\\":65")},
      {"bad_missing_tensor.hlsession", edit(valid, "\"runs/A/logits\"", "\"runs/A/logitz\"")},
      {"bad_no_manifest.hlsession", edit(valid, "\"hybridlens_session\"", "\"hybridlens_sessioX\"")},
  };
  for (const auto& [name, bytes] : files) {
    write_bytes(dir + "/" + name, bytes);
    std::printf("%-36s %6zu bytes\n", name.c_str(), bytes.size());
  }
  ::unlink((ck + "/config.json").c_str());
  ::unlink((ck + "/model.safetensors").c_str());
  ::rmdir(ck.c_str());
  return 0;
}

int bench(const std::string& ckpt_arg, int64_t n_tokens, bool ab, const std::string& out_arg, bool logits_f16) {
  std::string dir = ckpt_arg, gen_dir;
  if (dir.empty()) {
    gen_dir = dir = temp_dir();
    hl::GenerateOptions g;
    g.config = hl::preset_config("demo-random");
    const auto t0 = Clock::now();
    hl::generate_checkpoint(dir, g);
    std::printf("generated demo-random checkpoint in %.2f s (%s)\n", since(t0), dir.c_str());
  }
  std::shared_ptr<hl::Model> model = hl::load_model(dir);
  const hl::JambaConfig& c = model->config;
  std::vector<int32_t> tokens(static_cast<size_t>(n_tokens));
  uint32_t s = 12345;
  for (auto& t : tokens) {
    s = s * 1664525u + 1013904223u;
    t = static_cast<int32_t>(3 + (s >> 8) % static_cast<uint32_t>(c.vocab_size - 3));
  }
  hl::RecordRequest req;
  req.prompt = tokens;
  req.options.full = true;
  req.backend = "cpu";
  auto t0 = Clock::now();
  hl::Recording rec = hl::make_recording(*model, hl::identify_checkpoint(dir), "", tokens, nullptr);
  rec.runs.push_back(hl::record_run(model, req));
  if (ab) {
    req.label = "B";
    req.options.normalizer_override = true;
    req.options.normalizer = hl::Normalizer::Softmax1;
    rec.runs.push_back(hl::record_run(model, req));
  }
  std::printf("recorded %zu run(s) of %lld tokens (H %lld, %lld layers, V %lld) in %.2f s\n", rec.runs.size(),
              static_cast<long long>(n_tokens), static_cast<long long>(c.hidden_size),
              static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.vocab_size), since(t0));

  const std::string path = out_arg.empty() ? temp_dir() + "/bench.hlsession" : out_arg;
  hl::SessionSaveOptions opts;
  if (logits_f16) opts.logits_dtype = hl::DType::F16;
  t0 = Clock::now();
  hl::save_session(path, rec, opts);
  const double save_s = since(t0);
  struct stat st {};
  ::stat(path.c_str(), &st);
  std::printf("session: %.1f MB (%lld bytes), saved in %.0f ms (atomic: temp + fsync + rename)\n", st.st_size / 1e6,
              static_cast<long long>(st.st_size), 1e3 * save_s);
  std::map<std::string, uint64_t> groups;
  std::map<std::string, std::string> dtypes;
  const hl::SafetensorsFile sf = hl::SafetensorsFile::open(path);
  for (const hl::TensorInfo& t : sf.tensors()) {
    const std::string field = t.name.substr(t.name.rfind('/') + 1);
    groups[field] += t.nbytes();
    dtypes[field] = hl::dtype_name(t.dtype);
  }
  for (const auto& [field, bytes] : groups) {
    if (bytes >= 100000) std::printf("  %-18s %-4s %8.1f MB\n", field.c_str(), dtypes[field].c_str(), bytes / 1e6);
  }
  double best = 1e9, first = 0, best_cpu = 1e9, first_cpu = 0;
  for (int i = 0; i < 3; ++i) {
    t0 = Clock::now();
    const double c0 = thread_cpu();
    hl::Recording back = hl::load_session(path);
    const double sec = since(t0), cpu = thread_cpu() - c0;
    if (i == 0) first = sec, first_cpu = cpu;
    best = std::min(best, sec);
    best_cpu = std::min(best_cpu, cpu);
    if (back.runs.size() != rec.runs.size() || back.runs[0].records.size() != rec.runs[0].records.size() ||
        std::memcmp(back.runs[0].records.back().logits.data(), rec.runs[0].records.back().logits.data(),
                    rec.runs[0].records.back().logits.size() * 4) != 0) {
      if (!logits_f16) throw hl::Error("the loaded session differs from the recorded one");
    }
  }
  t0 = Clock::now();
  hl::read_session_summary(path);
  const double summary_s = since(t0);
  std::printf(
      "load: %.0f ms first (%.0f ms CPU), %.0f ms best of 3 (%.0f ms CPU), page cache warm; summary (manifest "
      "only): %.1f ms\n",
      1e3 * first, 1e3 * first_cpu, 1e3 * best, 1e3 * best_cpu, 1e3 * summary_s);
  if (out_arg.empty()) {
    ::unlink(path.c_str());
    ::rmdir(path.substr(0, path.rfind('/')).c_str());
  }
  if (!gen_dir.empty()) {
    ::unlink((gen_dir + "/config.json").c_str());
    ::unlink((gen_dir + "/model.safetensors").c_str());
    ::rmdir(gen_dir.c_str());
  }
  return 0;
}

int run(int argc, char** argv) {
  std::string ckpt, out, corpus;
  int64_t n = 4096;
  bool ab = false, f16 = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) throw hl::Error(a + ": missing value");
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--checkpoint") {
      ckpt = val();
    } else if (a == "--tokens") {
      const std::string v = val();
      n = std::atoll(v.c_str());
      if (n < 1 || n > hl::kSessionMaxTokens) throw hl::Error("--tokens " + v + ": allowed 1..1048576");
    } else if (a == "--ab") {
      ab = true;
    } else if (a == "--logits-f16") {
      f16 = true;
    } else if (a == "--out") {
      out = val();
    } else if (a == "--write-corpus") {
      corpus = val();
    } else {
      throw hl::Error("unknown option " + a + " (see --help)");
    }
  }
  if (!corpus.empty()) return write_corpus(corpus);
  return bench(ckpt, n, ab, out, f16);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hl-bench-session: %s\n", e.what());
    return 1;
  }
}
