// Internals of the CUDA backend (not a public header): the CudaBackend class. cuda_backend.cpp holds
// the set-up, the run state, the decode graph, the record readback and the public entry points of
// cuda_backend.h; cuda_forward.cpp the model loop (embed → layers → norm → head and the records'
// statistics) and CudaRun, through which the layer modules (cuda_module.h: attention, Mamba-1, the
// feed-forwards) enqueue their kernels.
#pragma once
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "engine/backend/backend_util.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/cuda_device.h"
#include "engine/backend/cuda/cuda_kernels.h"
#include "engine/backend/cuda/cuda_module.h"
#include "engine/backend/device_record.h"
#include "engine/core/error.h"

namespace hl::cuda {

// The model-level norms of a layer: before its mixer, before its feed-forward.
struct LayerDev {
  const float* in_norm = nullptr;
  const float* ff_norm = nullptr;
};

class CudaBackend final : public Backend {
 public:
  // With a link: one stage of a pipeline (make_cuda_stage_backend), layers ranges[link->rank()].
  CudaBackend(std::shared_ptr<const Model> model, const CudaOptions& opts, StageLink* link = nullptr,
              std::vector<LayerRange> ranges = {});
  ~CudaBackend() override;
  std::string name() const override { return "cuda"; }
  void start(const RunOptions& opts) override;
  void forward(const int32_t* tokens, int64_t S, std::vector<TokenTrace>* out) override;
  int64_t position() const override { return position_; }
  const Model& model() const override { return *model_; }
  const RunOptions& options() const override { return opts_; }
  int registers() const override { return n_reg_; }

  // The named intermediates from the next block on (set_cuda_observer); empty: none.
  void set_observer(IntermediateObserver f) { observer_ = std::move(f); }

  CudaStepInfo step_info() const {
    return {kernels_per_token_, decode_graph_, pdl_, device_};
  }

 private:
  friend class CudaRun;  // the modules' view: products, buffers, options (cuda_forward.cpp)
  void upload_weights();
  void fail_guard() const;
  void plan_records();
  int64_t block_limit() const;
  void bind_state();
  void ensure_kv(int64_t rows);
  void ensure_block(int64_t S);
  // Runs S positions (token ids, or register rows as -row-1). A stage after the first takes its
  // input rows from rows_ at row `row0`, a stage before the last leaves its output rows there.
  void run_block(const int32_t* ids, int64_t S, bool records, int64_t row0 = 0);
  bool first_stage() const { return !link_ || link_->rank() == 0; }
  bool last_stage() const { return !link_ || link_->rank() == link_->size() - 1; }
  void enqueue(int64_t S, bool records);
  // One half of layer i: h += unit(x) (decode: fused into the unit's last product), then the norm
  // norm_w into x, observing residual point `column` (−1: none); ffn: the FFN whose work is fused
  // into that norm (the MoE router), or null.
  void half_layer(CudaUnit& unit, int64_t S, bool fused, int column, const float* norm_w, float* rec,
                  const CudaFfn* ffn);
  void capture_decode();
  ResidArgs resid_args(int64_t S, bool add_y, int column, const float* norm_w, float* rec, const CudaFfn* ffn) const;
  void resid(int64_t S, bool add_y, int column, const float* norm_w, float* rec, const CudaFfn* ffn = nullptr);
  // Decode: the norm step fused into the kernel that finishes h (the mixer's or the FF's last product).
  Tail tail(const ResidArgs& r) const {
    Tail t;
    t.on = true;
    t.r = r;
    t.counter = counter_.as<unsigned>();
    return t;
  }
  void sync(const char* what);
  // With an observer and outside a graph capture: S rows of `cols` floats, row s at dev + s·stride,
  // copied to the host after the stream's work and reported as `name` of `layer` (−1: model-level).
  void observe(const char* name, int64_t layer, const float* dev, int64_t stride, int64_t cols, int64_t S);
  // The half-layer's output y as `name` (mixer_out, ffn_out) where the block materialises it.
  void observe_output(const char* name, int64_t layer, int64_t S);
  void read_records(int64_t S, TokenTrace* recs) const;
  void drop_graph();

  std::shared_ptr<const Model> model_;
  const JambaConfig& cfg_;
  CudaOptions copts_;
  RunOptions opts_;
  int n_reg_ = 0;
  int64_t position_ = 0;
  int64_t kv_len_ = 0;
  std::string failed_;
  std::string device_;
  bool pdl_ = false;
  bool fuse_ = true;  // decode norms fused into the products (HL_CUDA_FUSE=0: separate kernels)

  const LayerSchedule& sched_;  // model_->schedule: per layer its kinds and its index among each kind
  // Pipeline (pipeline.h): the link to the other stages (null: the whole model), every stage's
  // layers, this stage's, and the host rows of the call in flight (registers or tokens, (n, H)).
  StageLink* link_ = nullptr;
  std::vector<LayerRange> ranges_;
  LayerRange mine_;
  std::vector<float> rows_host_;

  cudaStream_t st_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  int64_t launches_ = 0, kernels_per_token_ = 0;

  // The layer modules (cuda_modules.cpp): per layer its mixer and its FFN (null: none, never both);
  // units_ all of them, each layer's mixer then its FFN.
  std::vector<std::unique_ptr<CudaMixer>> mixers_;
  std::vector<std::unique_ptr<CudaFfn>> ffns_;
  std::vector<CudaUnit*> units_;
  CudaRun run_{*this};

  // Weights.
  CudaWeights weights_;
  DW embed_, lm_head_;
  const float* final_norm_ = nullptr;
  const float* regs_ = nullptr;  // (trained + 1, H): trained registers, then the mean embedding
  int64_t trained_ = 0;
  std::vector<LayerDev> layers_;
  int64_t wide_cap_ = 0;  // floats of the widening scratch for prefill products

  // Run state.
  std::vector<std::vector<CudaStateNeed>> needs_;  // per unit: its state buffers (CudaUnit::state)
  std::vector<std::vector<DevMem>> state_;         // per unit: those buffers
  DevMem rank1_;    // (L+1, H+4) doubles
  DevMem counter_;  // the fused norms' block counter (cuda_kernels.h Tail)
  Tail tail_;       // decode: the norm the current half-layer's last kernel runs
  int64_t kv_cap_ = 0, cap_ = 0;
  RecLayout rl_;
  int64_t rec_alloc_stride_ = -1;

  // Block buffers (capacity cap_ tokens): one device allocation holding the backend's and the units'
  // scratch (CudaScratchNeed), the units' pinned scratch by key.
  DevMem act_, params_d_, rec_d_, wide_;
  Pinned params_h_, rec_h_;
  std::map<std::string, Pinned> pinned_;
  CudaScratch scratch_;
  float *h_ = nullptr, *x_ = nullptr, *y_ = nullptr, *rows_ = nullptr;
  float *stage_in_ = nullptr, *stage_out_ = nullptr;  // pinned (cap, H): a stage's residual rows in and out
  float *dt_ = nullptr, *ret_ = nullptr;  // (M_n, cap, Di) each SSM layer's Δ and retained share, for the record

  // Observation (set_cuda_observer): the observer, the host copy of one observed tensor, and whether
  // the decode step is being captured (no copies then: a capture runs nothing).
  IntermediateObserver observer_;
  std::vector<float> obs_host_;
  bool capturing_ = false;

  // The decode step as a graph.
  cudaGraphExec_t graph_exec_ = nullptr;
  bool decode_graph_ = false;  // the last decode step ran as the graph (a prefill since may have dropped it)
  uint64_t gen_ = 1, graph_gen_ = 0;
  std::vector<int> baked_;  // the run options a captured step holds: instruments, full, normalizers
};

}  // namespace hl::cuda
