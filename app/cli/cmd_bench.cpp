// `hybridlens bench --checkpoint DIR|FILE.gguf [--backend B] [--tokens N] [--json]` (trace-format.md §4):
// decode tokens/s with the instruments on and off, prefill tokens/s of a 512-token prompt, bytes
// read per token and the memory bandwidth, all measured in the same rounds (decode on and off — on
// the CPU two runs in lockstep —, a prefill, one bandwidth pass), reported as medians of the rounds.
// With --weights LIST, CPU decode of the checkpoint quantised on load to each format, in the same rounds
// (issue 19: bytes read against the bandwidth, speed-ups against the stored weights).
// With the CUDA backend also the device's figures (issue 8): its copy bandwidth, the kernels one decode
// step launches and the cost of one launch inside a CUDA graph, and the step against that floor.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <utility>

#include "app/cli/args.h"
#include "app/cli/commands.h"
#include "app/cli/run_args.h"
#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_simd.h"
#include "engine/core/bandwidth.h"
#include "engine/core/thread_pool.h"
#include "engine/core/error.h"
#include "engine/core/sys_memory.h"
#include "engine/model/loader.h"
#include "engine/model/quantize.h"
#ifdef HL_HAVE_CUDA
#include "engine/backend/cuda/cuda_backend.h"
#endif

namespace hl::cli {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

double best(const std::vector<double>& v) {
  return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
}

double seconds_of(Backend& b, int32_t id, std::vector<TokenTrace>* recs) {
  const auto t0 = std::chrono::steady_clock::now();
  b.forward(&id, 1, recs);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Tokens/s of one-token decode steps of `ids` after a fresh start; each step's seconds go to `steps`.
double decode_rate(Backend& b, bool instruments, const std::vector<int32_t>& ids, std::vector<double>* steps) {
  RunOptions o;
  o.instruments = instruments;
  b.start(o);
  std::vector<TokenTrace> recs;
  recs.reserve(ids.size());
  double t = 0;
  for (int32_t id : ids) {
    steps->push_back(seconds_of(b, id, &recs));
    t += steps->back();
  }
  return static_cast<double>(ids.size()) / t;
}

// A backend decoding with the instruments on and its twin with them off, their step times, and
// the seconds of the last decode_lockstep.
struct OnOff {
  Backend* on;
  Backend* off;
  std::vector<double>* s_on;
  std::vector<double>* s_off;
  double t_on = 0, t_off = 0;
};

// Every pair's two runs from a fresh start, stepped together token by token: at each token the
// pairs take turns (the first rotating with the token and with `turn`) and within a pair on and off
// alternate which goes first, so whatever else the machine does at a moment hits all of them alike.
// Each run keeps its records, as a session does.
void decode_lockstep(std::vector<OnOff>& runs, const std::vector<int32_t>& ids, size_t turn) {
  RunOptions o;
  RunOptions o_off;
  o_off.instruments = false;
  std::vector<std::vector<TokenTrace>> r_on(runs.size()), r_off(runs.size());
  for (size_t k = 0; k < runs.size(); ++k) {
    runs[k].on->start(o);
    runs[k].off->start(o_off);
    r_on[k].reserve(ids.size());
    r_off[k].reserve(ids.size());
    runs[k].t_on = runs[k].t_off = 0;
  }
  for (size_t i = 0; i < ids.size(); ++i)
    for (size_t j = 0; j < runs.size(); ++j) {
      const size_t k = (j + i + turn) % runs.size();
      OnOff& p = runs[k];
      if (i % 2 == 0) p.s_on->push_back(seconds_of(*p.on, ids[i], &r_on[k]));
      p.s_off->push_back(seconds_of(*p.off, ids[i], &r_off[k]));
      if (i % 2 == 1) p.s_on->push_back(seconds_of(*p.on, ids[i], &r_on[k]));
      p.t_on += p.s_on->back();
      p.t_off += p.s_off->back();
    }
}

// Tokens/s with the instruments on and off from two runs stepped in lockstep (decode_lockstep).
std::pair<double, double> decode_rates_lockstep(Backend& on, Backend& off, const std::vector<int32_t>& ids,
                                                std::vector<double>* s_on, std::vector<double>* s_off) {
  std::vector<OnOff> runs = {OnOff{&on, &off, s_on, s_off}};
  decode_lockstep(runs, ids, 0);
  const double n = static_cast<double>(ids.size());
  return {n / runs[0].t_on, n / runs[0].t_off};
}

// Tokens/s of one prefill of `ids` after a fresh start (instruments on, as a user runs it).
double prefill_rate(Backend& b, const std::vector<int32_t>& ids) {
  b.start(RunOptions{});
  std::vector<TokenTrace> recs;
  const auto t0 = std::chrono::steady_clock::now();
  b.forward(ids.data(), static_cast<int64_t>(ids.size()), &recs);
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(ids.size()) / dt;
}

// The records every run of a --weights round keeps (formats × on and off × steps), at least their
// logits: refused with one line before any decoding when they would not fit the available memory.
void check_record_memory(const JambaConfig& c, size_t formats, int64_t n) {
  const double need = static_cast<double>(formats) * 2.0 * static_cast<double>(n) *
                      static_cast<double>(c.vocab_size) * sizeof(float);
  const AvailableMemory m = available_memory();
  if (need <= static_cast<double>(m.bytes)) return;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f GB", need / 1e9);
  throw Error("--weights: the records of " + std::to_string(n) + " decode steps for " + std::to_string(formats) +
              " formats, instruments on and off, need at least " + buf + " of logits, more than the " +
              describe(m) + "; use fewer --tokens or formats");
}

// --weights LIST: the checkpoint loaded once per format (model/quantize.h), all decoded on the CPU
// with the instruments on and off in one lockstep, token by token (decode_lockstep: a step of
// every format and setting before the next token, so a change in the shared machine's speed lands
// on all formats alike, not on whichever decoded then), one bandwidth pass per round; medians of
// the rounds. Speed-ups are against the first format of the list.
int benchWeights(const ParsedArgs& a, const std::vector<std::string>& names, int64_t n, int64_t rounds) {
  struct Entry {
    std::string name;
    std::shared_ptr<Model> model;
    std::unique_ptr<Backend> on, off;
    std::vector<double> r_on, r_off, s_on, s_off;
  };
  std::vector<Entry> es;
  for (const std::string& f : names) {
    LoadOptions o;
    o.weights = parse_weight_format(f, "--weights", &o.quantize_head, &o.fp32_activations);
    Entry e;
    e.name = o.weights || o.fp32_activations ? f : "as-stored";
    e.model = load_model(a.get("checkpoint"), o);
    if (es.empty()) check_record_memory(e.model->config, names.size(), n);
    e.on = make_backend("cpu", e.model);
    e.off = make_backend("cpu", e.model);
    es.push_back(std::move(e));
  }
  const int64_t V = es[0].model->config.vocab_size;
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(V - 1));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& id : ids) id = pick(rng);
  BandwidthProbe probe;
  std::vector<double> bws, warm;
  for (Entry& e : es) decode_rate(*e.on, true, std::vector<int32_t>(ids.begin(), ids.begin() + std::min<int64_t>(n, 4)), &warm);
  probe.pass();
  std::vector<OnOff> runs;
  for (Entry& e : es) runs.push_back(OnOff{e.on.get(), e.off.get(), &e.s_on, &e.s_off});
  for (int64_t r = 0; r < rounds; ++r) {
    decode_lockstep(runs, ids, static_cast<size_t>(r));
    for (size_t k = 0; k < es.size(); ++k) {
      es[k].r_on.push_back(static_cast<double>(n) / runs[k].t_on);
      es[k].r_off.push_back(static_cast<double>(n) / runs[k].t_off);
    }
    bws.push_back(probe.pass());
  }
  const double bw = median(bws);
  nlohmann::json j = {{"checkpoint", es[0].model->name}, {"backend", "cpu"}, {"decode_tokens", n}, {"rounds", rounds},
                      {"memory_bandwidth_gb_s", bw}, {"threads", ThreadPool::global().size()},
                      {"cpu_isa", cpu::simd::kernels().name}, {"formats", nlohmann::json::array()}};
  const double base = median(es[0].r_on);
  const double base_p50 = median(es[0].s_on);
  for (Entry& e : es) {
    const double on = median(e.r_on), off = median(e.r_off), p50_on = median(e.s_on), p50_off = median(e.s_off);
    const int64_t bytes = e.model->weight_bytes_per_token();
    nlohmann::json f = {{"weights", e.name},
                        {"weight_bytes_per_token", bytes},
                        {"decode_tok_s_on", on},
                        {"decode_tok_s_off", off},
                        {"ratio_on_off", on / off},
                        {"ratio_on_off_p50", p50_off / p50_on},
                        {"decode_gb_s", static_cast<double>(bytes) * on / 1e9},
                        {"bandwidth_fraction", static_cast<double>(bytes) * on / 1e9 / bw},
                        {"bandwidth_fraction_p50", static_cast<double>(bytes) / p50_on / 1e9 / bw},
                        {"speedup_on", on / base},
                        {"speedup_on_p50", base_p50 / p50_on}};
    if (e.model->quantization) {
      f["quantized_matrices"] = e.model->quantization->quantized_count();
      f["worst_rel_rms"] = e.model->quantization->worst_rel_rms();
      f["quantize_seconds"] = e.model->quantization->seconds;
    }
    j["formats"].push_back(f);
  }
  if (a.has("json")) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("backend cpu (%s, %d threads), %s: decode %lld steps x %lld rounds; memory read bandwidth %.2f GB/s\n",
              cpu::simd::kernels().name, ThreadPool::global().size(), es[0].model->name.c_str(), static_cast<long long>(n),
              static_cast<long long>(rounds), bw);
  int width = 9;
  for (const Entry& e : es) width = std::max(width, static_cast<int>(e.name.size()));
  for (const auto& f : j["formats"])
    std::printf("  %-*s %8.1f MiB/token  on %8.2f tok/s  off %8.2f tok/s  on/off %.3f  %5.1f GB/s (%3.0f%% of bandwidth)  "
                "x%.2f vs %s\n",
                width, f["weights"].get<std::string>().c_str(), f["weight_bytes_per_token"].get<int64_t>() / 1048576.0,
                f["decode_tok_s_on"].get<double>(), f["decode_tok_s_off"].get<double>(), f["ratio_on_off"].get<double>(),
                f["decode_gb_s"].get<double>(), 100.0 * f["bandwidth_fraction"].get<double>(),
                f["speedup_on"].get<double>(), es[0].name.c_str());
  return 0;
}

}  // namespace

int runBench(const std::vector<std::string>& args) {
  ArgParser p("bench",
              "--checkpoint DIR|FILE.gguf [--backend auto|cpu|vulkan|cuda] [--tokens N] [--rounds R] [--prefill N] [--json]\n"
              "       --checkpoint DIR --weights as-stored,q8_0,q4_k [--tokens N] [--rounds R] [--json]",
              "Decode and prefill speed with the instruments on and off, measured in one run.");
  p.option("checkpoint", "DIR", "checkpoint folder, or a GGUF file (any shard of a split)", true)
      .option("backend", "NAME", "auto (default), cpu, vulkan or cuda")
      .option("tokens", "N", "decode steps per round (1 .. 100000, default 64)")
      .option("rounds", "R", "rounds of on, off, prefill and a bandwidth pass (1 .. 100, default 3)")
      .option("prefill", "N", "prompt length of the prefill measurement (1 .. 100000, default 512)")
      .option("weights", "LIST",
              "compare decode on the CPU across weight formats, comma-separated (" + weight_format_choices() +
                  ", each optionally +head, then optionally +fp32-activations: x kept in fp32 instead of 8 bits); "
                  "speed-ups against the first")
      .flag("json", "print one JSON object");
  const ParsedArgs a = p.parse(args);
  if (a.helpRequested()) {
    std::fputs(p.usage().c_str(), stdout);
    return 0;
  }
  const int64_t n = a.getIntOr("tokens", 64, 1, 100000);
  const int64_t rounds = a.getIntOr("rounds", 3, 1, 100);
  const int64_t prefill_n = a.getIntOr("prefill", 512, 1, 100000);
  if (a.has("weights")) {
    std::vector<std::string> names;
    std::string list = a.get("weights");
    for (size_t at = 0; at <= list.size();) {
      const size_t comma = std::min(list.find(',', at), list.size());
      names.push_back(list.substr(at, comma - at));
      at = comma + 1;
    }
    try {
      bool fp32x = false;
      for (const std::string& f : names) parse_weight_format(f, "--weights", nullptr, &fp32x);
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
    if (a.has("backend") && a.get("backend") != "cpu") throw UsageError("--weights compares CPU decode: use --backend cpu or leave it out");
    return benchWeights(a, names, n, rounds);
  }
  std::shared_ptr<Model> model = load_model(a.get("checkpoint"));
  const int64_t V = model->config.vocab_size;
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(V - 1));
  std::vector<int32_t> ids(static_cast<size_t>(std::max(n, prefill_n)));
  for (int32_t& id : ids) id = pick(rng);
  const std::vector<int32_t> decode_ids(ids.begin(), ids.begin() + n);

  const std::vector<int32_t> prefill_ids(ids.begin(), ids.begin() + prefill_n);
  BandwidthProbe probe;
  std::vector<double> warm, steps_on, steps_off;  // per-step seconds of every round
  std::vector<double> on, off, pre, bws;
  // With `auto`, a GPU backend lost mid-measurement is replaced by the CPU and the measurement redone.
  auto measure = [&](std::unique_ptr<Backend>& bp) {
    Backend* b = bp.get();
    warm.clear(), steps_on.clear(), steps_off.clear(), on.clear(), off.clear(), pre.clear(), bws.clear();
    decode_rate(*b, true, std::vector<int32_t>(decode_ids.begin(), decode_ids.begin() + std::min<int64_t>(n, 4)),
                &warm);
    probe.pass();
    // The CPU backend shares the model's weights between instances, so a second one costs only its
    // state: on and off then run in lockstep. Other backends alternate whole rounds.
    std::unique_ptr<Backend> b_off = b->name() == "cpu" ? make_backend("cpu", model) : nullptr;
    for (int64_t r = 0; r < rounds; ++r) {  // alternate so drift and other processes hit all alike
      if (b_off) {
        const auto [r_on, r_off] = decode_rates_lockstep(*b, *b_off, decode_ids, &steps_on, &steps_off);
        on.push_back(r_on);
        off.push_back(r_off);
      } else if (r % 2 == 0) {
        on.push_back(decode_rate(*b, true, decode_ids, &steps_on));
        off.push_back(decode_rate(*b, false, decode_ids, &steps_off));
      } else {
        off.push_back(decode_rate(*b, false, decode_ids, &steps_off));
        on.push_back(decode_rate(*b, true, decode_ids, &steps_on));
      }
      pre.push_back(prefill_rate(*b, prefill_ids));
      bws.push_back(probe.pass());
    }
  };
  const std::unique_ptr<Backend> b = runWithFallback("bench", backendOption(a), model, measure);
  const double on_s = median(on), off_s = median(off), bw = median(bws), prefill_s = median(pre);
  // Median step times: robust to the odd step a busy machine preempts, which the rates above absorb.
  const double p50_on = median(steps_on), p50_off = median(steps_off);
  const int64_t bytes = model->weight_bytes_per_token();
  const double gb_s = static_cast<double>(bytes) * on_s / 1e9;
  nlohmann::json j = {{"backend", b->name()},
                      {"checkpoint", model->name},
                      {"params", model->param_count()},
                      {"active_params", model->active_param_count()},
                      {"weight_bytes_per_token", bytes},
                      {"decode_tokens", n},
                      {"rounds", rounds},
                      {"prefill_tokens", prefill_n},
                      {"prefill_tok_s", prefill_s},
                      {"decode_tok_s_on", on_s},
                      {"decode_tok_s_off", off_s},
                      {"ratio_on_off", on_s / off_s},
                      {"decode_gb_s", gb_s},
                      {"memory_bandwidth_gb_s", bw},
                      // Beyond §4: the fractions the targets are stated in, the best rounds, the setup.
                      {"bandwidth_fraction", gb_s / bw},
                      {"prefill_over_decode", prefill_s / on_s},
                      {"decode_ms_p50_on", 1e3 * p50_on},
                      {"decode_ms_p50_off", 1e3 * p50_off},
                      {"ratio_on_off_p50", p50_off / p50_on},
                      {"decode_gb_s_p50", static_cast<double>(bytes) / p50_on / 1e9},
                      {"bandwidth_fraction_p50", static_cast<double>(bytes) / p50_on / 1e9 / bw},
                      {"prefill_over_decode_p50", prefill_s * p50_on},
                      {"decode_tok_s_on_best", best(on)},
                      {"decode_tok_s_off_best", best(off)},
                      {"prefill_tok_s_best", best(pre)},
                      {"memory_bandwidth_gb_s_best", best(bws)},
                      {"threads", ThreadPool::global().size()},
                      {"cpu_isa", b->name() == "cpu" ? cpu::simd::kernels().name : "n/a"}};
#ifdef HL_HAVE_CUDA
  // CUDA (issue 8): the device's own figures next to the host's. The targets: decode GB/s against the
  // device bandwidth (a device-to-device copy kernel, read + write), and the time per token against the
  // launch floor (kernels per token × one empty kernel's launch inside a CUDA graph).
  CudaStepInfo info;
  const bool cuda = cuda_step_info(*b, &info);
  CudaDeviceFigures dev;
  if (cuda) {
    dev = cuda_measure_device();
    const double floor_ms = static_cast<double>(info.kernels_per_token) * dev.launch_us_graph * 1e-3;
    j["cuda_device"] = info.device;
    j["cuda_graph"] = info.graph;
    j["cuda_programmatic_launch"] = info.programmatic_launch;
    j["device_memory_bytes"] = dev.memory_bytes;
    j["device_bandwidth_gb_s"] = dev.copy_gb_s;
    j["device_bandwidth_fraction"] = gb_s / dev.copy_gb_s;
    j["device_bandwidth_fraction_p50"] = static_cast<double>(bytes) / p50_on / 1e9 / dev.copy_gb_s;
    j["kernels_per_token"] = info.kernels_per_token;
    j["launch_us_graph"] = dev.launch_us_graph;
    j["launch_us_stream"] = dev.launch_us_stream;
    j["launch_floor_ms"] = floor_ms;
    j["decode_over_launch_floor_p50"] = 1e3 * p50_on / floor_ms;
  }
#endif
  if (a.has("json")) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("backend %s, %s: %.1f M parameters (%.1f M active), %.1f MiB read per decode step\n", b->name().c_str(),
              model->name.c_str(), model->param_count() / 1e6, model->active_param_count() / 1e6, bytes / 1048576.0);
  std::printf("  decode, instruments on:  %.2f tok/s (median of %lld rounds of %lld steps)\n", on_s,
              static_cast<long long>(rounds), static_cast<long long>(n));
  std::printf("  decode, instruments off: %.2f tok/s  (on/off = %.3f; median steps %.3f / %.3f ms, on/off %.3f)\n",
              off_s, on_s / off_s, 1e3 * p50_on, 1e3 * p50_off, p50_off / p50_on);
  std::printf("  prefill of %lld tokens:  %.2f tok/s (%.1f x decode)\n", static_cast<long long>(prefill_n), prefill_s,
              prefill_s / on_s);
  std::printf("  weights read at %.2f GB/s; memory read bandwidth %.2f GB/s (%.0f%%)\n", gb_s, bw, 100.0 * gb_s / bw);
#ifdef HL_HAVE_CUDA
  if (cuda)
    std::printf("  %s: device bandwidth %.1f GB/s (decode at %.0f%%); %lld kernels per token%s, launch %.2f us in a "
                "graph (%.2f us on a stream): floor %.3f ms, decode p50 %.3f ms (%.2f x floor)\n",
                info.device.c_str(), dev.copy_gb_s, 100.0 * gb_s / dev.copy_gb_s,
                static_cast<long long>(info.kernels_per_token), info.graph ? " (one CUDA graph)" : "",
                dev.launch_us_graph, dev.launch_us_stream, j["launch_floor_ms"].get<double>(), 1e3 * p50_on,
                1e3 * p50_on / j["launch_floor_ms"].get<double>());
#endif
  return 0;
}

}  // namespace hl::cli
