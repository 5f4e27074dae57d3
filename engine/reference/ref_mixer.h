// The reference forward's mixer units (issue 14 items 2–3): one per mixer kind, in the kind's own
// file (ref_attention.cpp, ref_mamba.cpp), added to RefMixerTable there. A unit keeps its layer's
// state for one run, computes one token's mixer output from its definition and fills the record
// fields of its part. ReferenceModel's loop (ref_model.cpp) names no kind.
#pragma once
#include <cstdint>
#include <memory>

#include "engine/backend/layer_modules.h"
#include "engine/backend/run_plan.h"
#include "engine/model/intermediates.h"
#include "engine/model/token_trace.h"
#include "engine/model/weights.h"

namespace hl::ref {

// Hands the (n,) floats named `name` of `layer` at run row `row` to `f`, if set.
inline void observe_row(const IntermediateObserver& f, const char* name, int64_t layer, int64_t row, const float* data,
                        int64_t n) {
  if (f) f(Intermediate{name, layer, row, 1, n, n, data});
}

// One row through one layer's mixer.
struct RefRow {
  int64_t layer = 0, row = 0;  // decoder layer; run row (registers first)
  TokenTrace* rec = nullptr;   // the token's record, null for a register
  bool instruments = false;    // fill the record's instrument fields (rec is non-null)
  bool full = false;           // ... and the --full ones
  const IntermediateObserver* observer = nullptr;
  // Hands (n,) floats named `name` to the observer, if any.
  void observe(const char* name, const float* data, int64_t n) const {
    if (observer) observe_row(*observer, name, layer, row, data, n);
  }
};

class RefMixer {
 public:
  virtual ~RefMixer() = default;
  // y (H,) from the layer's normalised input x (H,); the state moves on by one row.
  virtual void token(const float* x, float* y, const RefRow& at) = 0;
};

// Makes the unit of layer `layer` for a new run (its state empty) under `plan`.
using MakeRefMixer = std::unique_ptr<RefMixer> (*)(const Model& m, int64_t layer, const RunPlan& plan);
using RefMixerTable = ModuleTable<MixerKind, MakeRefMixer, struct RefMixerTag>;

}  // namespace hl::ref
