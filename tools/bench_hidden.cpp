// hl-bench-hidden: what the app's attention view waits for when it shows an SSM layer's hidden
// attention (engine/probes/hidden_attention.h) at T tokens: the CPU tracker catching up on a run it has
// not followed yet (one prefill of T − 1 tokens), following the T-th token, the current row (the mean |M|
// over the heads or channels, and one head), and the earlier rows that fit the app's budget. Each
// figure is the median over the rounds, all measured in this one run.
// usage: hl-bench-hidden --checkpoint DIR [--tokens T (default 4096)] [--layer L (default: the first
//        SSM layer)] [--rounds R (default 3)]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/model/loader.h"
#include "tools/bench_util.h"
#include "engine/probes/hidden_attention.h"

using namespace hl;

namespace {

using bench::median;

template <typename F>
double ms(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  int64_t T = 4096, layer = -1;
  int rounds = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--checkpoint")) dir = argv[i + 1];
    else if (!std::strcmp(argv[i], "--tokens")) T = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--layer")) layer = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
  }
  if (dir.empty() || T < 2 || rounds < 1) {
    std::fprintf(stderr, "usage: hl-bench-hidden --checkpoint DIR [--tokens T] [--layer L] [--rounds R]\n");
    return 2;
  }
  try {
    std::shared_ptr<Model> model = load_model(dir);
    const LayerSchedule& s = model->schedule;
    if (layer < 0 && !s.ssm_layers().empty()) layer = s.ssm_layers()[0];
    if (layer < 0 || layer >= s.size() || !s[layer].has_ssm()) throw Error("no SSM layer to measure (" + s.describe() + ")");
    std::vector<int32_t> ids(static_cast<size_t>(T));
    uint32_t x = 12345;
    for (int32_t& id : ids) {
      x = x * 1664525u + 1013904223u;
      id = static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(model->config.vocab_size));
    }
    std::vector<double> catchUp, follow, meanRow, headRow, window;
    int64_t windowRows = 0, heads = 0;
    for (int r = 0; r < rounds; ++r) {
      HiddenAttentionTracker tracker(model, RunOptions{});
      catchUp.push_back(ms([&] { tracker.follow(ids.data(), T - 1); }));
      follow.push_back(ms([&] { tracker.follow(ids.data(), T); }));
      const SsmRows& rows = tracker.layer(s[layer].ssm_index);
      heads = rows.nh;
      const int64_t t = tracker.registers() + T - 1;
      std::vector<float> out(static_cast<size_t>(t + 1));
      meanRow.push_back(ms([&] { hidden_attention_head_or_mean_row(rows, -1, t, out.data()); }));
      headRow.push_back(ms([&] { hidden_attention_head_or_mean_row(rows, 0, t, out.data()); }));
      const int64_t r0 = hidden_attention_window_start(rows, -1, t, kHiddenWindowBudget);
      windowRows = t - r0;
      window.push_back(ms([&] {
        for (int64_t q = r0; q < t; ++q) hidden_attention_head_or_mean_row(rows, -1, q, out.data());
      }));
    }
    std::printf("hidden attention of layer %lld (%s, %lld %s) at %lld tokens, median of %d rounds:\n",
                static_cast<long long>(layer), mixer_name(s[layer].mixer), static_cast<long long>(heads),
                s[layer].mixer == MixerKind::Mamba1 ? "channels" : "heads", static_cast<long long>(T), rounds);
    std::printf("  tracker catching up on %lld tokens (one prefill)   %9.1f ms\n", static_cast<long long>(T - 1), median(catchUp));
    std::printf("  tracker following one more token                   %9.2f ms\n", median(follow));
    std::printf("  current row, mean |M| over the %-5lld               %9.2f ms\n", static_cast<long long>(heads), median(meanRow));
    std::printf("  current row, one %-7s                           %9.2f ms\n",
                s[layer].mixer == MixerKind::Mamba1 ? "channel" : "head", median(headRow));
    std::printf("  %lld earlier rows of the mean within the app's budget %9.1f ms\n", static_cast<long long>(windowRows),
                median(window));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hl-bench-hidden: %s\n", e.what());
    return 1;
  }
  return 0;
}
