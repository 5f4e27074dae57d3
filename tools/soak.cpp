// hl-soak: the soak test of issue 10. (1) 50 loads and unloads of a generated checkpoint, after
// which resident memory (VmRSS) is back within 5% of its level after the first load; (2) 10,000
// decode steps on the CPU backend (--steps; 100,000 by hand, issue 18), during which resident memory
// grows only by what the KV cache (the records' kv_cache_bytes, fp32) and the recorded per-token
// records predict, checked at every tenth of the run and at the end. Prints the figures and exits
// non-zero when a bound is broken. Not a benchmark (hl bench, tools/bench_*).
// Run by `.ci/run soak` and registered in CTest with the label `slow`.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/core/error.h"
#include "engine/core/sys_memory.h"
#include "engine/model/generator.h"
#include "engine/model/loader.h"

namespace {

// Resident set size of this process in bytes (sys_memory.h).
int64_t resident_bytes() {
  return hl::resident_memory();
}

double mib(int64_t b) {
  return static_cast<double>(b) / (1 << 20);
}

// Bytes glibc's malloc takes for a request of n bytes (8-byte header, 16-byte granules, 32 at
// least): the per-allocation cost of a record's vectors.
int64_t malloc_chunk(size_t n) {
  if (n == 0) return 0;  // an empty vector allocates nothing
  const int64_t c = (static_cast<int64_t>(n) + 8 + 15) & ~int64_t{15};
  return c < 32 ? 32 : c;
}

template <class T>
int64_t heap_of(const std::vector<T>& v) {
  return malloc_chunk(v.capacity() * sizeof(T));
}

// Heap bytes a record owns beyond sizeof(TokenTrace).
int64_t record_heap_bytes(const hl::TokenTrace& r) {
  return heap_of(r.logits) + heap_of(r.attn_entropy) + heap_of(r.attn_entropy_norm) + heap_of(r.attn_mass) +
         heap_of(r.attn_max_logit) + heap_of(r.ssm_delta_mean) + heap_of(r.router_probs) + heap_of(r.router_topk) +
         heap_of(r.router_lse) + heap_of(r.rank1_distance) + heap_of(r.resid_max_abs) + heap_of(r.ssm_delta) +
         heap_of(r.ssm_retained) + heap_of(r.attn_rows);
}

struct Args {
  int64_t steps = 10000, loads = 50, warmup = 256;
  std::string preset = "demo-random", dir;
  double load_tolerance = 0.05;  // RSS after the last load vs after the first
  // Measured growth may exceed the prediction by this fraction (allocator rounding, page-granular
  // RSS), by 2 MiB, and by one more KV cache's worth: the backend doubles its reserved KV rows, so
  // up to twice the rows in use are resident.
  double decode_slack = 0.03;
  int64_t decode_slack_bytes = int64_t{2} << 20;
};

int usage() {
  std::fprintf(stderr,
               "usage: hl-soak [--steps N] [--loads N] [--preset NAME] [--dir DIR]\n"
               "  --steps N     decode steps (default 10000; 100000 by hand)\n"
               "  --loads N     model loads and unloads (default 50)\n"
               "  --preset NAME generator preset of the checkpoint (default demo-random)\n"
               "  --dir DIR     where to generate it (default: a temporary folder, removed after)\n");
  return 2;
}

// Loads and unloads `loads` times, each with a short run so the weights are touched. Returns false
// when the last load's RSS is not within tolerance of the first's.
bool soak_loads(const Args& a, const std::string& dir) {
  std::printf("::: %lld model loads and unloads (%s)\n", static_cast<long long>(a.loads), dir.c_str());
  const int32_t ids[8] = {1, 17, 230, 5, 99, 1000, 42, 7};
  int64_t first_loaded = 0, last_loaded = 0, first_unloaded = 0, last_unloaded = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < a.loads; ++i) {
    int64_t loaded = 0;
    {
      std::shared_ptr<hl::Model> m = hl::load_model(dir);
      std::unique_ptr<hl::Backend> b = hl::make_backend("cpu", m);
      b->start(hl::RunOptions{});
      std::vector<hl::TokenTrace> recs;
      for (int32_t id : ids) b->forward(&id, 1, &recs);
      loaded = resident_bytes();
    }
    const int64_t unloaded = resident_bytes();
    if (i == 0) {
      first_loaded = loaded;
      first_unloaded = unloaded;
    }
    last_loaded = loaded;
    last_unloaded = unloaded;
    if (i == 0 || (i + 1) % 10 == 0)
      std::printf("    load %3lld: RSS %8.2f MiB loaded, %8.2f MiB after unload\n", static_cast<long long>(i + 1),
                  mib(loaded), mib(unloaded));
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double drift = std::fabs(static_cast<double>(last_loaded - first_loaded)) / static_cast<double>(first_loaded);
  const bool ok = drift <= a.load_tolerance;
  std::printf(
      "soak loads: RSS after load 1 %.2f MiB, after load %lld %.2f MiB: %+.2f%% (bound %.0f%%); "
      "after unload 1 %.2f MiB, after unload %lld %.2f MiB; %.1f s: %s\n",
      mib(first_loaded), static_cast<long long>(a.loads), mib(last_loaded),
      100.0 * static_cast<double>(last_loaded - first_loaded) / static_cast<double>(first_loaded),
      100 * a.load_tolerance, mib(first_unloaded), static_cast<long long>(a.loads), mib(last_unloaded), s,
      ok ? "ok" : "FAILED");
  return ok;
}

// Decodes `steps` tokens, keeping every record (as a recording does). Returns false when RSS grew
// by more than the KV cache and the records account for (plus the slack).
bool soak_decode(const Args& a, const std::string& dir) {
  std::shared_ptr<hl::Model> m = hl::load_model(dir);
  const hl::JambaConfig& c = m->config;
  std::unique_ptr<hl::Backend> b = hl::make_backend("cpu", m);
  hl::RunOptions o;
  o.max_context = a.steps + a.warmup;
  b->start(o);
  std::printf("::: %lld decode steps on %s (%s: H %lld, V %lld, %lld layers), records kept\n",
              static_cast<long long>(a.steps), b->name().c_str(), a.preset.c_str(),
              static_cast<long long>(c.hidden_size), static_cast<long long>(c.vocab_size),
              static_cast<long long>(c.num_hidden_layers));
  std::vector<hl::TokenTrace> recs;
  uint32_t x = 12345;
  auto next_token = [&]() {  // deterministic, spread over the vocabulary (varied routing)
    x = x * 1664525u + 1013904223u;
    return static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(c.vocab_size));
  };
  // Warm-up: scratch buffers, the thread pool and the first KV reservation reach their steady size.
  for (int64_t i = 0; i < a.warmup; ++i) {
    const int32_t id = next_token();
    b->forward(&id, 1, &recs);
  }
  const size_t base_n = recs.size();
  const int64_t base_rss = resident_bytes();
  const int64_t base_kv = recs.back().kv_cache_bytes;
  const int64_t base_vec = static_cast<int64_t>(recs.capacity() * sizeof(hl::TokenTrace));
  // The prediction from sizes alone, at any point: the KV cache's new bytes, the records' heap
  // blocks and the growth of the record array. The bound adds the slack and one more KV cache.
  int64_t heap = 0;
  size_t counted = base_n;
  auto predicted_now = [&](int64_t* kv, int64_t* vec) {
    for (; counted < recs.size(); ++counted) heap += record_heap_bytes(recs[counted]);
    *kv = recs.back().kv_cache_bytes - base_kv;  // fp32 K and V of the new tokens
    *vec = static_cast<int64_t>(recs.capacity() * sizeof(hl::TokenTrace)) - base_vec;
    return *kv + heap + *vec;
  };
  auto bound_of = [&](int64_t predicted, int64_t kv) {
    return predicted + static_cast<int64_t>(a.decode_slack * static_cast<double>(predicted)) + a.decode_slack_bytes +
           kv;
  };
  // Checked at every report, not only at the end: memory must stay bounded all the way.
  const int64_t every = std::max<int64_t>(1000, (a.steps / 10 + 999) / 1000 * 1000);
  bool all_ok = true;
  double worst = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < a.steps; ++i) {
    const int32_t id = next_token();
    b->forward(&id, 1, &recs);
    if ((i + 1) % every == 0 && i + 1 < a.steps) {
      int64_t kv = 0, vec = 0;
      const int64_t p = predicted_now(&kv, &vec), grew = resident_bytes() - base_rss;
      const bool ok = grew <= bound_of(p, kv);
      all_ok = all_ok && ok;
      worst = std::max(worst, static_cast<double>(grew) / static_cast<double>(p));
      const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("    step %6lld: RSS %8.2f MiB, grew %8.2f MiB, predicted %8.2f MiB, bound %8.2f MiB, %.1f s: %s\n",
                  static_cast<long long>(i + 1), mib(resident_bytes()), mib(grew), mib(p), mib(bound_of(p, kv)), el,
                  ok ? "ok" : "OVER");
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t measured = resident_bytes() - base_rss;
  int64_t kv = 0, vec = 0;
  const int64_t predicted = predicted_now(&kv, &vec);
  const int64_t bound = bound_of(predicted, kv);
  const bool ok = measured <= bound && all_ok;
  worst = std::max(worst, static_cast<double>(measured) / static_cast<double>(predicted));
  std::printf(
      "soak decode: %lld steps in %.1f s (%.2f ms/token); RSS grew %.2f MiB, predicted %.2f MiB "
      "(KV cache %.2f MiB = %lld bytes/token fp32, record data %.2f MiB = %.0f bytes/token, record "
      "array %.2f MiB); measured/predicted %.3f (worst at a report %.3f), bound %.2f MiB: %s\n",
      static_cast<long long>(a.steps), s, 1e3 * s / static_cast<double>(a.steps), mib(measured), mib(predicted),
      mib(kv), static_cast<long long>(kv / a.steps), mib(heap),
      static_cast<double>(heap) / static_cast<double>(a.steps), mib(vec),
      static_cast<double>(measured) / static_cast<double>(predicted), worst, mib(bound), ok ? "ok" : "FAILED");
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress lines reach a log file as they happen
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "-h" || k == "--help") return usage(), 0;
    if (i + 1 >= argc) return usage();
    const std::string v = argv[++i];
    if (k == "--steps")
      a.steps = std::atoll(v.c_str());
    else if (k == "--loads")
      a.loads = std::atoll(v.c_str());
    else if (k == "--preset")
      a.preset = v;
    else if (k == "--dir")
      a.dir = v;
    else
      return usage();
  }
  if (a.steps < 1 || a.loads < 1) return usage();
  namespace fs = std::filesystem;
  const bool temp = a.dir.empty();
  try {
    if (temp) {
      std::string tmpl = (fs::temp_directory_path() / "hl_soak_XXXXXX").string();
      if (!::mkdtemp(tmpl.data())) throw hl::Error("cannot create a temporary folder");
      a.dir = tmpl;
    }
    hl::GenerateOptions g;
    g.config = hl::preset_config(a.preset);
    g.seed = 0;
    hl::generate_checkpoint(a.dir, g);
    const bool loads_ok = soak_loads(a, a.dir);
    const bool decode_ok = soak_decode(a, a.dir);
    if (temp) fs::remove_all(a.dir);
    std::printf("hl-soak: %s\n", loads_ok && decode_ok ? "ok" : "FAILED");
    return loads_ok && decode_ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hl-soak: %s\n", e.what());
    std::error_code ec;
    if (temp) fs::remove_all(a.dir, ec);
    return 1;
  }
}
