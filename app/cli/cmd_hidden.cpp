// `hybridlens hidden-attention` (trace-format.md §5): runs the tokens through the CPU backend with a
// collector on its ssm_conv / ssm_delta intermediates and prints, for one SSM layer and token,
// each head's hidden-attention row M_h[t, ·] (Ali, Zimerman & Wolf 2024): its statistics and strongest
// keys, and optionally every row value as CSV. The math is engine/probes/hidden_attention.h.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "app/cli/args.h"
#include "app/cli/commands.h"
#include "app/cli/run_args.h"
#include "engine/core/error.h"
#include "engine/probes/hidden_attention.h"

namespace hl::cli {
namespace {

ArgParser hiddenParser() {
  ArgParser p("hidden-attention",
              "--checkpoint DIR|FILE.gguf (--ids 1,2,3 | --prompt TEXT [--no-bos] | --chat FILE.json) [--layer L] [--token T]\n"
              "       [--head H] [--top K] [--registers N] [--csv FILE]",
              "Runs the model on the CPU backend and prints the hidden attention of an SSM layer at one\n"
              "token: per Mamba-2 head h the row M_h[t, s] = (C_t . B_s) exp(A_h sum_{r=s+1..t} delta_r) delta_s\n"
              "over the keys s <= t (registers first, then tokens), its entropy and first-key share over |M|,\n"
              "and its strongest keys. A Mamba-1 layer's heads are its channels (a decay per state entry);\n"
              "without --head it prints their mean |M|. --csv writes head,key,value rows.");
  addTokenOptions(p);
  p.option("layer", "L", "decoder layer with an SSM part (default: the first)")
      .option("token", "T", "token index (default: the last)")
      .option("head", "H", "one head, or Mamba-1 channel (default: every Mamba-2 head; Mamba-1: the channel mean)")
      .option("top", "K", "strongest keys to list per head (default 5)")
      .option("registers", "N", "test-time register rows before the tokens (default: the trained count)")
      .option("csv", "FILE", "write every row value: head,key,value");
  return p;
}

}  // namespace

int runHiddenAttention(const std::vector<std::string>& args) {
  ArgParser p = hiddenParser();
  ParsedArgs a = p.parse(args);
  if (a.helpRequested()) {
    std::fputs(p.usage().c_str(), stdout);
    return 0;
  }
  checkInputOptions(a);
  RunOptions opts;
  if (a.has("registers")) opts.registers = static_cast<int>(a.getIntOr("registers", 0, 0, kMaxRegisters));
  const int64_t top = a.getIntOr("top", 5, 1, 1 << 20);
  if (a.has("csv")) checkOutputPath(a.get("csv"));

  std::shared_ptr<Model> model = loadModelOptions(a);
  const LayerSchedule& s = model->schedule;
  int64_t layer = s.ssm_layers().empty() ? -1 : s.ssm_layers()[0];
  if (a.has("layer")) layer = a.getIntOr("layer", 0, 0, s.size() - 1);
  if (layer < 0 || !s[layer].has_ssm())
    throw UsageError((layer < 0 ? std::string("the model has no SSM layer")
                                : "layer " + std::to_string(layer) + " is " + mixer_name(s[layer].mixer) +
                                      ", without an SSM part") +
                     " (" + s.describe() + ")");
  const bool mamba1 = s[layer].mixer == MixerKind::Mamba1;
  std::unique_ptr<Tokenizer> tok;
  if ((a.has("prompt") || a.has("chat")) && !model->tokenizer_path.empty()) tok = Tokenizer::load(model->tokenizer_path);
  const std::vector<int32_t> ids = inputTokens(a, *model, tok.get());
  const int64_t T = static_cast<int64_t>(ids.size());
  const int64_t t = a.has("token") ? a.getIntOr("token", 0, 0, T - 1) : T - 1;
  // Heads: Mamba-2's heads, or Mamba-1's channels (without --head, their mean |M| in one row).
  const int64_t nh = mamba1 ? model->config.mamba_inner() : model->config.mamba_n_heads;
  const int64_t h0 = a.has("head") ? a.getIntOr("head", 0, 0, nh - 1) : mamba1 ? -1 : 0;
  const int64_t h1 = a.has("head") ? h0 + 1 : mamba1 ? 0 : nh;

  HiddenAttentionTracker tracker(model, opts);  // a CPU backend and the collector on its intermediates
  tracker.follow(ids.data(), T);                 // one prefill: the collector takes every row in order
  const SsmRows& rows = tracker.layer(s[layer].ssm_index);
  const int64_t n_reg = tracker.registers(), row = n_reg + t, n = row + 1;

  std::printf("hidden attention of layer %lld (%s, SSM layer %lld), token %lld of %lld (row %lld; %lld register%s first)\n",
              static_cast<long long>(layer), mixer_name(s[layer].mixer), static_cast<long long>(s[layer].ssm_index),
              static_cast<long long>(t), static_cast<long long>(T), static_cast<long long>(row),
              static_cast<long long>(n_reg), n_reg == 1 ? "" : "s");
  std::ofstream csv;
  if (a.has("csv")) {
    csv.open(a.get("csv"));
    csv << "head,key,value\n";
  }
  std::vector<float> m(static_cast<size_t>(n));
  std::vector<int64_t> order(static_cast<size_t>(n));
  double rowSeconds = 0;
  for (int64_t h = h0; h < h1; ++h) {
    const auto r0 = std::chrono::steady_clock::now();
    hidden_attention_head_or_mean_row(rows, h, row, m.data());
    rowSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - r0).count();
    const HiddenRowStats st = hidden_row_stats(m.data(), n);
    std::iota(order.begin(), order.end(), 0);
    const int64_t k = std::min(top, n);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int64_t x, int64_t y) { return std::fabs(m[x]) > std::fabs(m[y]); });
    const std::string who = h < 0 ? "mean |M| over the " + std::to_string(nh) + " channels"
                                   : (mamba1 ? "channel " : "head ") + std::to_string(h);
    std::printf("%s  entropy %.4f nats (%.3f of ln %lld), first key %.4f, sum |M| %.4g; strongest:", who.c_str(),
                st.entropy, st.entropy_norm, static_cast<long long>(n), st.first_mass, st.abs_sum);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t key = order[static_cast<size_t>(j)];
      const std::string name = key < n_reg ? "reg" + std::to_string(key) : "#" + std::to_string(ids[key - n_reg]);
      std::printf(" %s@%lld %.4g", name.c_str(), static_cast<long long>(key), m[key]);
    }
    std::printf("\n");
    if (csv.is_open())
      for (int64_t key = 0; key < n; ++key) csv << (h < 0 ? std::string("mean") : std::to_string(h)) << ',' << key << ','
                                                 << m[key] << '\n';
  }
  std::printf("%lld %s row%s of %lld keys in %.3f ms\n", static_cast<long long>(h1 - h0),
              h0 < 0 ? "channel-mean" : mamba1 ? "channel" : "head", h1 - h0 == 1 ? "" : "s", static_cast<long long>(n),
              1e3 * rowSeconds);
  if (csv.is_open() && !csv.good()) throw Error("could not write " + a.get("csv"));
  return 0;
}

}  // namespace hl::cli
