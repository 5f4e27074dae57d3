// The CPU backend's layer modules (issue 14 item 2, layer_modules.h): one unit per layer and part,
// a mixer (cpu_attention.cpp, cpu_mamba1.cpp) or a feed-forward (cpu_ffn.cpp), made through the
// tables of cpu_modules.cpp. A unit owns its layer's state and precomputed weights; what the units
// share (model, run options, register count, scratch, observer) is CpuRun. Not the model loop:
// cpu_backend.cpp, which names no kind.
#pragma once
#include <algorithm>
#include <memory>
#include <typeindex>
#include <unordered_map>
#include <vector>

#include "engine/backend/layer_modules.h"
#include "engine/backend/run_plan.h"
#include "engine/model/intermediates.h"
#include "engine/model/layer_schedule.h"
#include "engine/model/token_trace.h"
#include "engine/model/weights.h"

namespace hl::cpu {

// v.data() with at least n elements; grows geometrically, never shrinks, so a steady decode
// allocates nothing. New elements are zero.
template <class T>
T* grow(std::vector<T>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) {
    if (v.capacity() < static_cast<size_t>(n)) v.reserve(std::max(static_cast<size_t>(n), 2 * v.capacity()));
    v.resize(static_cast<size_t>(n));
  }
  return v.data();
}

// What the units of one CPU backend share.
class CpuRun {
 public:
  explicit CpuRun(const Model& m) : model(m), cfg(m.config), sched(m.schedule) {}
  const Model& model;
  const JambaConfig& cfg;
  const LayerSchedule& sched;  // model.schedule: per layer its kinds and its index among each kind
  RunOptions opts;             // this run's (set by start)
  int n_reg = 0;               // register rows fed at start
  std::vector<std::vector<float>> thread_rows;  // per pool thread: attention logits | probabilities
  IntermediateObserver observer;

  // The observer, if set, on S rows of `cols` floats of `name` (rows of recs: null ones are registers).
  void observe(const char* name, int64_t layer, const float* data, int64_t S, int64_t cols,
               TokenTrace* const* recs) const {
    if (!observer) return;
    const int64_t row = recs[0] ? n_reg + recs[0]->position : 0;
    observer(Intermediate{name, layer, row, S, cols, cols, data});
  }
  // Buffers shared by the units of one kind (its T, default-constructed on first use): one forward
  // runs the layers one after another, so they grow to the largest S seen and are reused.
  template <class T>
  T& scratch() {
    std::shared_ptr<void>& p = scratch_[std::type_index(typeid(T))];
    if (!p) p = std::make_shared<T>();
    return *static_cast<T*>(p.get());
  }

 private:
  std::unordered_map<std::type_index, std::shared_ptr<void>> scratch_;
};

// A token mixer of one layer: y (S, H) from its normed input x (S, H), keeping the layer's state
// across calls; instruments into recs[s] (null: a register row, no record).
class CpuMixer {
 public:
  virtual ~CpuMixer() = default;
  virtual void start(const RunPlan& plan) = 0;  // a new run: clear the state (buffers are kept)
  virtual void forward(const float* x, int64_t S, float* y, TokenTrace* const* recs) = 0;
};

// A feed-forward of one layer: y (S, H) from x (S, H); stateless between tokens.
class CpuFfn {
 public:
  virtual ~CpuFfn() = default;
  virtual void forward(const float* x, int64_t S, float* y, TokenTrace* const* recs) = 0;
};

using MakeCpuMixer = std::unique_ptr<CpuMixer> (*)(CpuRun& run, int64_t layer);
using MakeCpuFfn = std::unique_ptr<CpuFfn> (*)(CpuRun& run, int64_t layer);
// The CPU's module tables: each unit's file adds its line with HL_REGISTER_MODULE.
using CpuMixerTable = ModuleTable<MixerKind, MakeCpuMixer, struct CpuMixerTag>;
using CpuFfnTable = ModuleTable<FfnKind, MakeCpuFfn, struct CpuFfnTag>;

// The unit of layer `layer`'s mixer / feed-forward by its kind in the schedule (cpu_modules.cpp);
// make_ffn gives null for FfnKind::None. A kind without a CPU unit throws BackendFailure.
std::unique_ptr<CpuMixer> make_mixer(CpuRun& run, int64_t layer);
std::unique_ptr<CpuFfn> make_ffn(CpuRun& run, int64_t layer);

}  // namespace hl::cpu
