// Helpers of the pipeline tests (test_pipeline.cpp, test_vulkan_pipeline.cpp, test_cuda_pipeline.cpp):
// an in-process StageLink between threads, the records of a decode-then-prefill feed, their
// bit-for-bit comparison over the trace field table, N stages of a checkpoint in N threads on a
// backend, and the device backends' shared checks (stages against one backend, mixed with a CPU
// stage, a model of another range refused).
#pragma once
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/pipeline.h"
#include "engine/core/error.h"
#include "engine/io/safetensors.h"
#include "engine/model/generator.h"
#include "engine/model/loader.h"
#include "engine/model/stage_load.h"
#include "engine/trace/trace_fields.h"
#include "tests/engine/trace_compare_util.h"
#include "tests/engine/test_util.h"

namespace hl::pipeline_test {

// Queues between threads: (from, to) → messages in order.
struct Wires {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::pair<int, int>, std::deque<std::vector<uint8_t>>> q;
};

class ThreadLink final : public StageLink {
 public:
  ThreadLink(Wires& w, int rank, int size) : w_(w), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void send(int to, const void* data, size_t bytes) override {
    const auto* p = static_cast<const uint8_t*>(data);
    std::lock_guard<std::mutex> lock(w_.mu);
    w_.q[{rank_, to}].emplace_back(p, p + bytes);
    w_.cv.notify_all();
  }
  void recv(int from, void* data, size_t bytes) override {
    std::unique_lock<std::mutex> lock(w_.mu);
    auto& q = w_.q[{from, rank_}];
    w_.cv.wait(lock, [&] { return !q.empty(); });
    std::vector<uint8_t> m = std::move(q.front());
    q.pop_front();
    if (m.size() != bytes) throw Error("ThreadLink: message of " + std::to_string(m.size()) + " bytes, expected " +
                                       std::to_string(bytes));
    std::memcpy(data, m.data(), bytes);
  }

 private:
  Wires& w_;
  int rank_, size_;
};

// The records of feeding `ids` one at a time, then `chunk` as one prefill.
inline std::vector<TokenTrace> feed(Backend& b, const RunOptions& opts, const std::vector<int32_t>& ids,
                             const std::vector<int32_t>& chunk) {
  std::vector<TokenTrace> out;
  b.start(opts);
  for (int32_t id : ids) b.forward(&id, 1, &out);
  b.forward(chunk.data(), static_cast<int64_t>(chunk.size()), &out);
  return out;
}

inline void expect_same(const std::vector<TokenTrace>& a, const std::vector<TokenTrace>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t t = 0; t < a.size(); ++t) {
    for (const TraceField& f : trace_fields()) {
      if (f.fvec) {
        const std::vector<float>&x = a[t].*f.fvec, &y = b[t].*f.fvec;
        ASSERT_EQ(x.size(), y.size()) << what << " token " << t << " " << f.name;
        // Bit for bit; an empty field has no data pointer to compare.
        EXPECT_TRUE(x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0)
            << what << " token " << t << " " << f.name;
      }
      if (f.ivec) EXPECT_EQ(a[t].*f.ivec, b[t].*f.ivec) << what << " token " << t << " " << f.name;
      if (f.i32) EXPECT_EQ(a[t].*f.i32, b[t].*f.i32) << what << " token " << t << " " << f.name;
      if (f.i64) EXPECT_EQ(a[t].*f.i64, b[t].*f.i64) << what << " token " << t << " " << f.name;
      if (f.f32) EXPECT_EQ(a[t].*f.f32, b[t].*f.f32) << what << " token " << t << " " << f.name;
    }
  }
}

// Stage `rank`'s backend: its model (load_stage), its link and every stage's layers.
using MakeStage = std::function<std::unique_ptr<Backend>(int rank, std::shared_ptr<const Model>, StageLink*,
                                                         const std::vector<LayerRange>&)>;

// Every stage of an n-stage pipeline of `dir` in its own thread, each made by make; each stage's records.
inline std::vector<std::vector<TokenTrace>> run_pipeline(const std::string& dir, int n, const RunOptions& opts,
                                                         const std::vector<int32_t>& ids,
                                                         const std::vector<int32_t>& chunk, const LoadOptions& lo,
                                                         const MakeStage& make) {
  const std::vector<LayerRange> ranges = split_checkpoint(dir, n);
  Wires wires;
  std::vector<std::vector<TokenTrace>> out(static_cast<size_t>(n));
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        ThreadLink link(wires, r, n);
        std::unique_ptr<Backend> b = make(r, load_stage(dir, lo, ranges[static_cast<size_t>(r)]), &link, ranges);
        out[static_cast<size_t>(r)] = feed(*b, opts, ids, chunk);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "stage " << r;
  return out;
}

// body(dir) on a generated checkpoint (seed 7) of each preset; Bamba's with its head tied to the
// embedding (the head on the last stage reads the first stage's matrix).
inline void for_each_family(const std::vector<const char*>& presets, const std::function<void(const std::string&)>& body) {
  for (const char* preset : presets) {
    SCOPED_TRACE(preset);
    hl::test::TempDir d;
    GenerateOptions g;
    g.config = preset_config(preset);
    g.config.tie_word_embeddings = std::string(preset) == "bamba-tiny";
    g.seed = 7;
    generate_checkpoint(d.path, g);
    body(d.path);
  }
}

// n-stage pipelines (each n of ns) of `dir` on backend `name` against `one`, that backend on the whole
// model: every record field of every stage bit for bit (step_seconds is each run's own time).
inline void expect_pipeline_equals_one(Backend& one, const std::string& name, const std::string& dir,
                                       const RunOptions& opts, const std::vector<int>& ns,
                                       const std::vector<int32_t>& ids, const std::vector<int32_t>& chunk) {
  const std::vector<TokenTrace> want = feed(one, opts, ids, chunk);
  for (int n : ns) {
    const std::vector<std::vector<TokenTrace>> got =
        run_pipeline(dir, n, opts, ids, chunk, {},
                     [&](int, std::shared_ptr<const Model> m, StageLink* link, const std::vector<LayerRange>& ranges) {
                       return make_stage_backend(name, std::move(m), link, ranges);
                     });
    for (int r = 0; r < n; ++r) {
      SCOPED_TRACE(base_name(dir) + " " + std::to_string(n) + " stages, stage " + std::to_string(r));
      std::vector<TokenTrace> g = got[static_cast<size_t>(r)];
      ASSERT_EQ(g.size(), want.size());
      for (size_t t = 0; t < g.size(); ++t) g[t].step_seconds = want[t].step_seconds;
      expect_same(want, g, name + " pipeline");
    }
  }
}

// Stages on different backends exchange the same float32 rows: a CPU stage and a `name` stage,
// either way round (2 stages, 2 registers, full records), agree with the CPU within the device
// tolerance (kVsCpu), on every stage.
inline void expect_mixed_with_cpu_stage_matches_cpu(const std::string& name, const std::string& dir,
                                                    const std::vector<int32_t>& ids, const std::vector<int32_t>& chunk) {
  RunOptions opts;
  opts.full = true;
  opts.registers = 2;
  cpu::CpuBackend cpu(load_model(dir));
  const std::vector<TokenTrace> want = feed(cpu, opts, ids, chunk);
  for (int device_rank : {0, 1}) {
    const std::vector<std::vector<TokenTrace>> got = run_pipeline(
        dir, 2, opts, ids, chunk, {},
        [&](int rank, std::shared_ptr<const Model> m, StageLink* link, const std::vector<LayerRange>& ranges) {
          return make_stage_backend(rank == device_rank ? name : "cpu", std::move(m), link, ranges);
        });
    for (const std::vector<TokenTrace>& g : got)
      backend_test::expect_traces_close(g, want, backend_test::kVsCpu,
                                        name + " on stage " + std::to_string(device_rank) + " vs cpu");
  }
}

// A `name` stage refuses a model loaded for another range than its own, as the CPU stage does
// (`dir`: 8 layers).
inline void expect_stage_of_another_range_refused(const std::string& name, const std::string& dir) {
  Wires w;
  ThreadLink link(w, 1, 2);
  try {
    make_stage_backend(name, load_stage(dir, {}, LayerRange{4, 8}), &link, {LayerRange{0, 3}, LayerRange{3, 8}});
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "pipeline: this stage runs layers [3, 8) but the model holds [4, 8)");
  }
}

}  // namespace hl::pipeline_test
