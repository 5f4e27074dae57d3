// `hybridlens bench --checkpoint DIR [--backend B] [--tokens N] [--json]` (trace-format.md §4):
// decode tokens/s with the instruments on and off (alternating rounds in one run, medians),
// prefill tokens/s of a 512-token prompt, bytes read per token and the measured memory bandwidth.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "app/cli/args.h"
#include "app/cli/commands.h"
#include "engine/backend/backend.h"
#include "engine/core/bandwidth.h"
#include "engine/model/loader.h"

namespace hl::cli {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

// Tokens/s of `n` one-token decode steps after a fresh start.
double decode_rate(Backend& b, bool instruments, const std::vector<int32_t>& ids) {
  RunOptions o;
  o.instruments = instruments;
  b.start(o);
  std::vector<TokenTrace> recs;
  recs.reserve(ids.size());
  const auto t0 = std::chrono::steady_clock::now();
  for (int32_t id : ids) b.forward(&id, 1, &recs);
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(ids.size()) / dt;
}

}  // namespace

int runBench(const std::vector<std::string>& args) {
  ArgParser p("bench", "--checkpoint DIR [--backend auto|cpu|vulkan|cuda] [--tokens N] [--rounds R] [--json]",
              "Decode and prefill speed with the instruments on and off, measured in one run.");
  p.option("checkpoint", "DIR", "checkpoint folder", true)
      .option("backend", "NAME", "auto (default), cpu, vulkan or cuda")
      .option("tokens", "N", "decode steps per round (1 .. 100000, default 64)")
      .option("rounds", "R", "alternating on/off rounds (1 .. 100, default 3)")
      .option("prefill", "N", "prompt length of the prefill measurement (1 .. 100000, default 512)")
      .flag("json", "print one JSON object");
  const ParsedArgs a = p.parse(args);
  if (a.helpRequested()) {
    std::fputs(p.usage().c_str(), stdout);
    return 0;
  }
  const int64_t n = a.getIntOr("tokens", 64, 1, 100000);
  const int64_t rounds = a.getIntOr("rounds", 3, 1, 100);
  const int64_t prefill_n = a.getIntOr("prefill", 512, 1, 100000);
  std::shared_ptr<Model> model = load_model(a.get("checkpoint"));
  std::unique_ptr<Backend> b = make_backend(a.getOr("backend", "auto"), model);
  const int64_t V = model->config.vocab_size;
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(V - 1));
  std::vector<int32_t> ids(static_cast<size_t>(std::max(n, prefill_n)));
  for (int32_t& id : ids) id = pick(rng);
  const std::vector<int32_t> decode_ids(ids.begin(), ids.begin() + n);

  decode_rate(*b, true, std::vector<int32_t>(decode_ids.begin(), decode_ids.begin() + std::min<int64_t>(n, 4)));
  std::vector<double> on, off;
  for (int64_t r = 0; r < rounds; ++r) {  // alternate so drift hits both alike
    on.push_back(decode_rate(*b, true, decode_ids));
    off.push_back(decode_rate(*b, false, decode_ids));
  }
  RunOptions po;
  b->start(po);
  std::vector<TokenTrace> recs;
  const auto t0 = std::chrono::steady_clock::now();
  b->forward(ids.data(), prefill_n, &recs);
  const double prefill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  recs.clear();
  const double bw = measure_read_bandwidth_gb_s();
  const double on_s = median(on), off_s = median(off);
  const int64_t bytes = model->weight_bytes_per_token();
  nlohmann::json j = {{"backend", b->name()},
                      {"checkpoint", model->name},
                      {"params", model->param_count()},
                      {"active_params", model->active_param_count()},
                      {"weight_bytes_per_token", bytes},
                      {"decode_tokens", n},
                      {"rounds", rounds},
                      {"prefill_tokens", prefill_n},
                      {"prefill_tok_s", static_cast<double>(prefill_n) / prefill_s},
                      {"decode_tok_s_on", on_s},
                      {"decode_tok_s_off", off_s},
                      {"ratio_on_off", on_s / off_s},
                      {"decode_gb_s", static_cast<double>(bytes) * on_s / 1e9},
                      {"memory_bandwidth_gb_s", bw}};
  if (a.has("json")) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("backend %s, %s: %.1f M parameters (%.1f M active), %.1f MiB read per decode step\n",
              b->name().c_str(), model->name.c_str(), model->param_count() / 1e6, model->active_param_count() / 1e6,
              bytes / 1048576.0);
  std::printf("  decode, instruments on:  %.2f tok/s (median of %lld rounds of %lld steps)\n", on_s,
              static_cast<long long>(rounds), static_cast<long long>(n));
  std::printf("  decode, instruments off: %.2f tok/s  (on/off = %.3f)\n", off_s, on_s / off_s);
  std::printf("  prefill of %lld tokens:  %.2f tok/s\n", static_cast<long long>(prefill_n),
              static_cast<double>(prefill_n) / prefill_s);
  std::printf("  weights read at %.2f GB/s; memory read bandwidth %.2f GB/s (%.0f%%)\n", bytes * on_s / 1e9, bw,
              100.0 * bytes * on_s / 1e9 / bw);
  return 0;
}

}  // namespace hl::cli
