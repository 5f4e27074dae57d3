// bench_views: the view-update time of every instrument view on a long recording (issue 5: "the
// median view-update time with 4096-token traces: at most 16 ms per update"). Runs the real CPU
// engine on a generated demo-random checkpoint with the full instruments (attention rows, Δ per
// channel), then times setState (rebuild + immediate replot) of each view at moving steps.
// Usage: bench_views [--tokens N] [--updates M] [--with-b] [--views ID,ID] [--out DIR (export figures)]
#include <time.h>
#include <unistd.h>
#include <QApplication>
#include <QElapsedTimer>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/model/generator.h"
#include "engine/model/loader.h"
#include "views/figure_export.h"
#include "views/instrument_view.h"
#include "views/view_registry.h"
#include "views/view_util.h"

namespace {

std::vector<hl::TokenTrace> run(const std::shared_ptr<const hl::Model>& m, const std::vector<int32_t>& ids,
                                const hl::RunOptions& o) {
  std::unique_ptr<hl::Backend> be = hl::make_backend("cpu", m);
  be->start(o);
  std::vector<hl::TokenTrace> out;
  out.reserve(ids.size());
  for (int32_t id : ids) be->forward(&id, 1, &out);
  return out;
}

double ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// CPU time of this thread in ms: robust to other processes sharing the cores.
double threadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  int tokens = 4096, updates = 60;
  bool withB = false;
  std::string out, only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--tokens" && i + 1 < argc)
      tokens = std::max(2, std::atoi(argv[++i]));
    else if (a == "--updates" && i + 1 < argc)
      updates = std::max(1, std::atoi(argv[++i]));
    else if (a == "--with-b")
      withB = true;
    else if (a == "--out" && i + 1 < argc)
      out = argv[++i];
    else if (a == "--views" && i + 1 < argc)
      only = argv[++i];
    else {
      std::fprintf(stderr, "usage: bench_views [--tokens N] [--updates M] [--with-b] [--views ID,ID] [--out DIR]\n");
      return 2;
    }
  }
  if (std::getenv("QT_QPA_PLATFORM") == nullptr) ::setenv("QT_QPA_PLATFORM", "offscreen", 1);
  QApplication app(argc, argv);

  // The recording: demo-random run by the CPU engine, full instruments, one token at a time.
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("hl_bench_views_" + std::to_string(::getpid()));
  hl::GenerateOptions g;
  g.config = hl::preset_config("demo-random");
  hl::generate_checkpoint(dir.string(), g);
  std::shared_ptr<const hl::Model> model = hl::load_model(dir.string());
  std::mt19937 rng(1);
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  for (int32_t& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(model->config.vocab_size));
  hl::Recording rec;
  rec.config = model->config;
  rec.tokens = ids;
  hl::RunOptions o;
  o.full = true;
  auto t0 = std::chrono::steady_clock::now();
  hl::Run a;
  a.label = "A";
  a.records = run(model, ids, o);
  rec.runs.push_back(std::move(a));
  if (withB) {
    hl::RunOptions ob = o;
    ob.normalizer_override = true;
    ob.normalizer = hl::Normalizer::Softmax1;
    hl::Run b;
    b.label = "B";
    b.records = run(model, ids, ob);
    rec.runs.push_back(std::move(b));
  }
  std::printf("recording: %d tokens x %zu run(s), demo-random, full instruments, engine %.1f s\n", tokens,
              rec.runs.size(), ms(std::chrono::steady_clock::now() - t0) / 1e3);
  std::filesystem::remove_all(dir);

  hl::views::ViewState st;
  st.rec = &rec;
  st.a = &rec.runs[0];
  st.b = withB ? &rec.runs[1] : nullptr;
  st.layer = 2;  // an attention layer: the attention pattern view draws its T x T heatmap
  st.hw.weightBytesPerToken = model->weight_bytes_per_token();
  st.hw.bandwidthGBs = 20;
  st.hw.deviceMemoryBytes = 16e9;

  // Steps: a sweep over the whole recording (scrubbing), ending at the last token.
  std::vector<int> steps;
  for (int i = 0; i < updates; ++i)
    steps.push_back(static_cast<int>((static_cast<int64_t>(i) + 1) * (tokens - 1) / updates));
  std::shuffle(steps.begin(), steps.end(), rng);

  std::vector<double> all, allCpu;
  std::printf("%-12s %9s %9s %9s %9s %9s   (ms per setState = rebuild + replot, %d updates, 900x600)\n", "view",
              "median", "p99", "max", "cpu med", "cpu p99", updates);
  for (hl::views::InstrumentView* v : hl::views::createAllViews()) {
    if (!only.empty() && ("," + only + ",").find("," + v->viewId().toStdString() + ",") == std::string::npos) {
      delete v;
      continue;
    }
    v->resize(900, 600);
    v->show();
    QApplication::processEvents();
    std::vector<double> t, cpu;
    for (int s : steps) {
      st.step = s;
      const double c0 = threadCpuMs();
      auto a0 = std::chrono::steady_clock::now();
      v->setState(st);
      t.push_back(ms(std::chrono::steady_clock::now() - a0));
      cpu.push_back(threadCpuMs() - c0);
    }
    QApplication::processEvents();
    all.insert(all.end(), t.begin(), t.end());
    allCpu.insert(allCpu.end(), cpu.begin(), cpu.end());
    std::printf("%-12s %9.2f %9.2f %9.2f %9.2f %9.2f\n", v->viewId().toStdString().c_str(),
                hl::views::percentile(t, 50), hl::views::percentile(t, 99), *std::max_element(t.begin(), t.end()),
                hl::views::percentile(cpu, 50), hl::views::percentile(cpu, 99));
    delete v;
  }
  if (!all.empty())
    std::printf("%-12s %9.2f %9.2f %9.2f %9.2f %9.2f\n", "all views", hl::views::percentile(all, 50),
                hl::views::percentile(all, 99), *std::max_element(all.begin(), all.end()),
                hl::views::percentile(allCpu, 50), hl::views::percentile(allCpu, 99));

  if (!out.empty()) {
    st.step = tokens - 1;
    hl::views::FigureExportOptions eo;
    eo.dir = QString::fromStdString(out);
    eo.formats = {"png"};
    const auto r = hl::views::exportFigures(st, eo);
    std::printf("exported %lld files to %s\n", static_cast<long long>(r.written.size()), out.c_str());
  }
  return 0;
}
