// hl-bench-ssd: CPU prefill tokens/s of Mamba-2 models with the chunked scan (cpu_ssd.h) against the
// token-order scan, measured in one run: the two modes alternate round by round on the same backend
// and prompt, and the ratio is that of the median rates. Two generated checkpoints: bamba-tiny as the
// preset has it (8 heads of 32, d_state 16, chunk 64, attention on 2 of 8 layers), and "bamba-wide",
// a Mamba-2-only Bamba with a published model's mixer shape per layer (32 heads of 64, one group,
// d_state 128, chunk_size 256; H 1024, 4 layers, V 512). Besides the whole prefill, the time of the
// SSM part alone (from each Mamba-2 layer's ssm_conv report to its ssm_y: Δ, the scan, the gated
// norm), through the backend's observer. Then short blocks, where the chunked form starts to pay
// (the figures behind cpu_ssd.h's ssd_pays).
// usage: hl-bench-ssd [--rounds R (default 3)] [--tokens T1,T2,... (default 1024,4096)] [--short 0|1
//        (the short-block sweep, default 1)] [--dir D (the checkpoints, default $TMPDIR/hl-bench-ssd)]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cpu/cpu_simd.h"
#include "engine/backend/cpu/cpu_ssd.h"
#include "engine/core/thread_pool.h"
#include "engine/model/generator.h"
#include "engine/model/intermediates.h"
#include "engine/model/loader.h"
#include "tools/bench_util.h"

using namespace hl;

namespace {

using bench::median;

JambaConfig wide() {
  JambaConfig c = preset_config("bamba-tiny");
  c.hidden_size = 1024;
  c.intermediate_size = 512;
  c.num_hidden_layers = 4;
  c.vocab_size = 512;
  c.attn_layer_indices = {};
  c.mamba_n_heads = 32;
  c.mamba_d_head = 64;
  c.mamba_n_groups = 1;
  c.mamba_d_state = 128;
  c.mamba_chunk_size = 256;
  return c;
}

std::shared_ptr<Model> generated(const std::string& dir, const JambaConfig& c) {
  if (!std::filesystem::exists(dir + "/config.json")) {
    GenerateOptions o;
    o.config = c;
    o.seed = 5;
    generate_checkpoint(dir, o);
  }
  return load_model(dir);
}

using Clock = std::chrono::steady_clock;

// The seconds spent between each Mamba-2 layer's ssm_conv and ssm_y reports (Δ, the scan, the gated
// norm), summed over a forward, from the backend's observer.
struct SsmClock {
  Clock::time_point at;
  double seconds = 0;
  void operator()(const Intermediate& t) {
    if (!std::strcmp(t.name, "ssm_conv")) at = Clock::now();
    if (!std::strcmp(t.name, "ssm_y")) seconds += std::chrono::duration<double>(Clock::now() - at).count();
  }
};

// Seconds of one prefill of `ids` after a fresh start, instruments on (as a user runs it); the SSM
// sections' part of them added to *ssm.
double prefill_seconds(cpu::CpuBackend& b, const std::vector<int32_t>& ids, cpu::Mamba2Scan mode, double* ssm) {
  cpu::set_mamba2_scan(mode);
  auto clock = std::make_shared<SsmClock>();
  b.set_observer([clock](const Intermediate& t) { (*clock)(t); });
  b.start(RunOptions{});
  std::vector<TokenTrace> recs;
  const auto t0 = Clock::now();
  b.forward(ids.data(), static_cast<int64_t>(ids.size()), &recs);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  cpu::set_mamba2_scan(cpu::Mamba2Scan::Auto);
  b.set_observer({});
  *ssm += clock->seconds;
  return s;
}

struct Rates {
  double chunked = 0, ordered = 0;          // prefill tokens/s
  double ssm_chunked = 0, ssm_ordered = 0;  // tokens/s of the SSM sections alone
};

// Medians of both modes over `rounds` alternating rounds of `reps` prefills each.
Rates rates(cpu::CpuBackend& b, int64_t T, int rounds, int reps) {
  std::vector<int32_t> ids(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t)
    ids[static_cast<size_t>(t)] = static_cast<int32_t>((t * 7919 + 3) % b.model().config.vocab_size);
  std::vector<double> chunked, ordered, ssm_c, ssm_o;
  for (int r = 0; r < rounds; ++r)
    for (int order = 0; order < 2; ++order) {
      const bool c = (order == 0) == (r % 2 == 0);
      double s = 0, ssm = 0;
      for (int k = 0; k < reps; ++k)
        s += prefill_seconds(b, ids, c ? cpu::Mamba2Scan::Chunked : cpu::Mamba2Scan::TokenOrder, &ssm);
      (c ? chunked : ordered).push_back(static_cast<double>(T * reps) / s);
      (c ? ssm_c : ssm_o).push_back(static_cast<double>(T * reps) / ssm);
    }
  return {median(chunked), median(ordered), median(ssm_c), median(ssm_o)};
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 3;
  bool short_blocks = true;
  std::vector<int64_t> lengths = {1024, 4096};
  std::string dir = (std::filesystem::temp_directory_path() / "hl-bench-ssd").string();
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rounds")) {
      rounds = std::max(1, std::atoi(argv[i + 1]));
    } else if (!std::strcmp(argv[i], "--tokens")) {
      lengths.clear();
      std::stringstream s(argv[i + 1]);
      for (std::string t; std::getline(s, t, ',');) lengths.push_back(std::max<int64_t>(2, std::atoll(t.c_str())));
    } else if (!std::strcmp(argv[i], "--short")) {
      short_blocks = std::atoi(argv[i + 1]) != 0;
    } else if (!std::strcmp(argv[i], "--dir")) {
      dir = argv[i + 1];
    } else {
      std::fprintf(stderr, "usage: hl-bench-ssd [--rounds R] [--tokens T1,T2,...] [--short 0|1] [--dir D]\n");
      return 2;
    }
  }
  std::printf("threads %d, isa %s, median of %d rounds\n", ThreadPool::global().size(), cpu::simd::kernels().name,
              rounds);
  for (const char* name : {"bamba-tiny", "bamba-wide"}) {
    const JambaConfig c = std::string(name) == "bamba-wide" ? wide() : preset_config(name);
    auto model = generated(dir + "/" + name, c);
    cpu::CpuBackend b(model);
    double unused = 0;
    prefill_seconds(b, std::vector<int32_t>(64, 5), cpu::Mamba2Scan::Chunked, &unused);  // warm the buffers
    std::printf("%s: nh %ld P %ld N %ld G %ld, chunk %ld\n", name, static_cast<long>(c.mamba_n_heads),
                static_cast<long>(c.mamba_d_head), static_cast<long>(c.mamba_d_state),
                static_cast<long>(c.mamba_n_groups), static_cast<long>(cpu::ssd_chunk(c.mamba_chunk_size)));
    for (int64_t T : lengths) {
      const Rates r = rates(b, T, rounds, 1);
      std::printf(
          "  T %5ld  prefill tok/s: chunked %8.0f  token-order %8.0f  ratio %.2f   SSM sections alone: "
          "chunked %9.0f  token-order %8.0f  ratio %.2f\n",
          static_cast<long>(T), r.chunked, r.ordered, r.chunked / r.ordered, r.ssm_chunked, r.ssm_ordered,
          r.ssm_chunked / r.ssm_ordered);
    }
    if (!short_blocks) continue;
    std::printf("  short blocks (Auto: chunked from %ld tokens), chunked / token-order:\n",
                static_cast<long>(cpu::ssd_pays(cpu::kSsdMinTokens, c.mamba_d_head, c.mamba_d_state)
                                      ? cpu::kSsdMinTokens
                                      : cpu::kSsdMinTokensSmall));
    for (int64_t T : {2, 4, 8, 16, 32, 64, 128}) {
      const Rates r = rates(b, T, rounds, std::max<int>(1, static_cast<int>(512 / T)));
      std::printf("  T %4ld  prefill %.2f  SSM sections %.2f\n", static_cast<long>(T), r.chunked / r.ordered,
                  r.ssm_chunked / r.ssm_ordered);
    }
  }
  return 0;
}
