// The CUDA backend (cuda_backend.h): device weights in their stored dtype (bf16/fp16/fp32), the run's
// device state (fp32 KV caches, Mamba windows and states, the rank-to-1 Welford state), the forward
// pass as launches of cuda_kernels.h, and the one device→host copy per step into pinned memory.
// Decode (S = 1): matrix-vector kernels on the stored weights (one warp per row, 16-byte loads), the
// Mamba conv in in_proj's epilogue and norms + Δ + scan in one kernel, every RMSNorm (and the MoE
// router) run by the last block of the product that finishes h, MoE experts chosen on the device,
// programmatic dependent launches on sm_90; the whole step (parameters in, kernels, record out)
// captured once as a CUDA graph and relaunched per token (plain launches when capture fails or
// HL_CUDA_GRAPHS=0; HL_CUDA_FUSE=0 / HL_CUDA_PDL=0 turn the fusions / PDL off). Prefill (S > 1):
// cuBLAS GemmEx in fp32 (16-bit weights widened in panels first, so results match the CPU's fp32
// products), the chunked parallel scan, and one host read of the routing per MoE layer. Mirrors cpu_backend.cpp's
// contract; a BackendFailure (no device, out of memory, a sticky device error) poisons the backend
// and leaves the caller's records as they were, so the caller can rebuild the run on the CPU.
#include "engine/backend/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "engine/backend/backend_util.h"
#include "engine/backend/cuda/cuda_kernels.h"
#include "engine/backend/cuda/cuda_math.h"
#include "engine/core/error.h"

namespace hl::cuda {
namespace {

std::atomic<int64_t> g_fail_after{-1};  // cuda_simulate_failure / HL_CUDA_FAIL_AFTER
std::atomic<int64_t> g_allocated{0};    // bytes this process holds through DevMem

int64_t memory_limit() {  // HL_CUDA_MEMORY_LIMIT=bytes: a test hook for the out-of-memory path
  const char* e = std::getenv("HL_CUDA_MEMORY_LIMIT");
  return e ? std::atoll(e) : int64_t{-1};
}

std::string mib(double bytes) {
  char b[64];
  std::snprintf(b, sizeof b, "%.1f MiB", bytes / 1048576.0);
  return b;
}

[[noreturn]] void fail(cudaError_t e, const std::string& what) {
  if (e == cudaErrorMemoryAllocation) throw BackendFailure("cuda: not enough device memory while " + what);
  throw BackendFailure("cuda: " + what + " failed: " + cudaGetErrorString(e));
}

void check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) {
    cudaGetLastError();  // clears a non-sticky error; a sticky one stays and poisons the backend anyway
    fail(e, what);
  }
}

void check_blas(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  if (s == CUBLAS_STATUS_ALLOC_FAILED) throw BackendFailure(std::string("cuda: not enough device memory in ") + what);
  throw BackendFailure(std::string("cuda: cuBLAS ") + what + " failed (status " + std::to_string(static_cast<int>(s)) +
                       ")");
}

// cuBLAS, loaded when the first CUDA backend is built rather than linked: every program of the
// project links the engine, and mapping cuBLAS at start-up costs ~0.2 s per process. Symbols already
// in the process (a program that links cuBLAS itself) are used as they are.
struct BlasApi {
  decltype(&cublasCreate) create = nullptr;
  decltype(&cublasDestroy) destroy = nullptr;
  decltype(&cublasSetStream) set_stream = nullptr;
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  std::string error;
};

const BlasApi& blas_api() {
  static const BlasApi api = [] {
    BlasApi a;
    void* lib = nullptr;
    if (!dlsym(RTLD_DEFAULT, "cublasGemmEx")) {
      const std::string so = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
      std::vector<std::string> names = {so};
#ifdef HL_CUBLAS_DIR
      names.push_back(std::string(HL_CUBLAS_DIR) + "/" + so);
#endif
      names.push_back("libcublas.so");
      std::string why;
      for (const std::string& n : names) {
        lib = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (lib) break;
        if (const char* e = dlerror()) why = e;
      }
      if (!lib) {
        a.error = "cuda: cannot load cuBLAS (" + why + ")";
        return a;
      }
    }
    auto sym = [&](const char* name) { return lib ? dlsym(lib, name) : dlsym(RTLD_DEFAULT, name); };
    a.create = reinterpret_cast<decltype(a.create)>(sym("cublasCreate_v2"));
    a.destroy = reinterpret_cast<decltype(a.destroy)>(sym("cublasDestroy_v2"));
    a.set_stream = reinterpret_cast<decltype(a.set_stream)>(sym("cublasSetStream_v2"));
    a.gemm_ex = reinterpret_cast<decltype(a.gemm_ex)>(sym("cublasGemmEx"));
    if (!a.create || !a.destroy || !a.set_stream || !a.gemm_ex)
      a.error = "cuda: cuBLAS lacks cublasGemmEx or cublasCreate_v2";
    return a;
  }();
  if (!api.error.empty()) throw BackendFailure(api.error);
  return api;
}

// Device memory owned by one object; allocation failures are BackendFailure naming the buffer.
class DevMem {
 public:
  DevMem() = default;
  DevMem(size_t bytes, const std::string& what) : bytes_(std::max<size_t>(bytes, 16)) {
    const int64_t lim = memory_limit();
    if (lim >= 0 && g_allocated.load() + static_cast<int64_t>(bytes_) > lim)
      throw BackendFailure("cuda: not enough device memory for " + what + " (" + mib(static_cast<double>(bytes_)) +
                           "; HL_CUDA_MEMORY_LIMIT " + mib(static_cast<double>(lim)) + ")");
    const cudaError_t e = cudaMalloc(&p_, bytes_);
    if (e != cudaSuccess) {
      cudaGetLastError();
      p_ = nullptr;
      if (e == cudaErrorMemoryAllocation) {
        size_t free_b = 0, total = 0;
        cudaMemGetInfo(&free_b, &total);
        throw BackendFailure("cuda: not enough device memory for " + what + " (" + mib(static_cast<double>(bytes_)) +
                             " needed, " + mib(static_cast<double>(free_b)) + " free of " +
                             mib(static_cast<double>(total)) + ")");
      }
      fail(e, "allocating " + what);
    }
    g_allocated += static_cast<int64_t>(bytes_);
  }
  DevMem(const DevMem&) = delete;
  DevMem& operator=(const DevMem&) = delete;
  DevMem(DevMem&& o) noexcept : p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr; }
  DevMem& operator=(DevMem&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = o.p_;
      bytes_ = o.bytes_;
      o.p_ = nullptr;
    }
    return *this;
  }
  ~DevMem() { reset(); }
  void reset() {
    if (p_) {
      cudaFree(p_);
      g_allocated -= static_cast<int64_t>(bytes_);
    }
    p_ = nullptr;
  }
  template <class T = float>
  T* as() const {
    return static_cast<T*>(p_);
  }
  size_t bytes() const { return p_ ? bytes_ : 0; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// Pinned host memory (the one readback per step and the step parameters).
class Pinned {
 public:
  Pinned() = default;
  Pinned(size_t bytes, const char* what) {
    check(cudaMallocHost(&p_, std::max<size_t>(bytes, 16)), std::string("allocating pinned memory for ") + what);
  }
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
  Pinned& operator=(Pinned&& o) noexcept {
    if (this != &o) {
      if (p_) cudaFreeHost(p_);
      p_ = o.p_;
      o.p_ = nullptr;
    }
    return *this;
  }
  ~Pinned() {
    if (p_) cudaFreeHost(p_);
  }
  template <class T = float>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  void* p_ = nullptr;
};

int dtype_code(DType t, const std::string& name) {
  switch (t) {
    case DType::F32:
      return cudam::kF32;
    case DType::F16:
      return cudam::kF16;
    case DType::BF16:
      return cudam::kBF16;
    default:
      throw BackendFailure("cuda: tensor '" + name + "' has dtype " + dtype_name(t) + ", not F32/F16/BF16");
  }
}

struct MlpDev {
  DW gate, up, down;
};

struct LayerDev {
  const float* in_norm = nullptr;
  const float* ff_norm = nullptr;
  DW q, k, v, o;
  const float* sinks = nullptr;
  DW in_proj, x_proj, dt_proj, out_proj;
  const float *in_bias = nullptr, *conv_w = nullptr, *conv_b = nullptr, *dt_norm = nullptr, *b_norm = nullptr;
  const float *c_norm = nullptr, *dt_bias = nullptr, *A = nullptr, *D = nullptr, *out_bias = nullptr;
  DW router;
  std::vector<MlpDev> mlps;        // the dense MLP, or the E experts
  const ExpertW* table = nullptr;  // device copy of mlps
};

// Float offsets inside one token's record (absent parts: 0 and unused).
struct RecLayout {
  int64_t logits = 0, nonfinite = 0, resid_max = 0, rank1 = 0, attn = 0, dmean = 0, rprobs = 0, rtopk = 0, rlse = 0;
  int64_t sdelta = 0, sret = 0, arows = 0, arow_stride = 0, stride = 0;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(std::shared_ptr<const Model> model, const CudaOptions& opts);
  ~CudaBackend() override;
  std::string name() const override { return "cuda"; }
  void start(const RunOptions& opts) override;
  void forward(const int32_t* tokens, int64_t S, std::vector<TokenTrace>* out) override;
  int64_t position() const override { return position_; }
  const Model& model() const override { return *model_; }
  const RunOptions& options() const override { return opts_; }
  int registers() const override { return n_reg_; }

  CudaStepInfo step_info() const {
    return {kernels_per_token_, graph_exec_ != nullptr && copts_.graphs, pdl_, device_};
  }

 private:
  void upload_weights();
  DW upload(const Mat& m);
  const float* upload_vec(const std::vector<float>& v, const char* what);
  void fail_guard() const;
  void plan_records();
  int64_t block_limit() const;
  void ensure_kv(int64_t rows);
  void ensure_block(int64_t S);
  void run_block(const int32_t* ids, int64_t S, bool records);
  void enqueue(int64_t S, bool records);
  void capture_decode();
  void attention(int64_t layer, int64_t S, float* rec);
  void mamba(int64_t layer, int64_t S, float* rec);
  void feed_forward(int64_t layer, int64_t S, float* rec);
  // moe_layer ≥ 0: also the router of that layer on the normed rows (fused).
  ResidArgs resid_args(int64_t S, bool add_y, int column, const float* norm_w, float* rec, int64_t moe_layer) const;
  void resid(int64_t S, bool add_y, int column, const float* norm_w, float* rec, int64_t moe_layer = -1);
  // Decode: the norm step fused into the kernel that finishes h (the mixer's or the FF's last product).
  Tail tail(const ResidArgs& r) const {
    Tail t;
    t.on = true;
    t.r = r;
    t.counter = counter_.as<unsigned>();
    return t;
  }
  void gemm(const DW& W, const float* X, int64_t S, float* Y, int64_t ldy);
  void gemv(std::initializer_list<GemvSeg> segs, const float* x, int epi, const Tail& t = Tail{});
  void sync(const char* what);
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

  std::vector<int64_t> kind_index_, moe_index_;
  int64_t n_attn_ = 0, n_mamba_ = 0, n_moe_ = 0;
  std::vector<int> norm_;  // per attention layer: the Normalizer of this run

  cudaStream_t st_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  int64_t launches_ = 0, kernels_per_token_ = 0;

  // Weights.
  std::vector<DevMem> wmem_;
  std::map<std::pair<const void*, int64_t>, const void*> uploaded_;  // (host data, bytes) → device copy (tied heads)
  DW embed_, lm_head_;
  const float* final_norm_ = nullptr;
  const float* regs_ = nullptr;  // (trained + 1, H): trained registers, then the mean embedding
  int64_t trained_ = 0;
  std::vector<LayerDev> layers_;
  int64_t wide_cap_ = 0;  // floats of the widening scratch for prefill products

  // Run state.
  std::vector<DevMem> kcache_, vcache_;
  DevMem mstate_;   // per Mamba layer: window (W, Di), then state (N, Di)
  DevMem rank1_;    // (L+1, H+4) doubles
  DevMem counter_;  // the fused norms' block counter (cuda_kernels.h Tail)
  Tail tail_;       // decode: the norm the current half-layer's last kernel runs
  int64_t kv_cap_ = 0, cap_ = 0;
  RecLayout rl_;
  int64_t rec_alloc_stride_ = -1;

  // Block buffers (capacity cap_ tokens).
  DevMem act_, params_d_, rec_d_, wide_, idx_d_;
  Pinned params_h_, rec_h_, route_h_, idx_h_;
  float *h_ = nullptr, *x_ = nullptr, *y_ = nullptr, *q_ = nullptr, *o_ = nullptr, *xz_ = nullptr, *u_ = nullptr;
  float *p_ = nullptr, *dtr_ = nullptr, *bm_ = nullptr, *cm_ = nullptr, *gated_ = nullptr, *dt_ = nullptr;
  float *ret_ = nullptr, *g_ = nullptr, *uf_ = nullptr, *xe_ = nullptr, *ye_ = nullptr, *probs_ = nullptr;
  float *selw_ = nullptr, *rows_ = nullptr, *z_ = nullptr, *sc_local_ = nullptr, *sc_prod_ = nullptr;
  float* sc_carry_ = nullptr;
  int32_t* sel_ = nullptr;
  int64_t zstride_ = 0;

  // The decode step as a graph.
  cudaGraphExec_t graph_exec_ = nullptr;
  uint64_t gen_ = 1, graph_gen_ = 0;
  std::vector<int> baked_;  // the run options a captured step holds: instruments, full, normalizers
};

CudaBackend::CudaBackend(std::shared_ptr<const Model> model, const CudaOptions& opts)
    : model_(std::move(model)), cfg_(model_->config), copts_(opts) {
  if (const char* g = std::getenv("HL_CUDA_GRAPHS"); g && std::strcmp(g, "0") == 0) copts_.graphs = false;
  const int64_t L = cfg_.num_hidden_layers;
  index_layers(cfg_, &kind_index_, &moe_index_, &n_attn_, &n_mamba_, &n_moe_);
  if (n_attn_ > 0 && cfg_.head_dim() > 256)
    throw BackendFailure("cuda: head_dim " + std::to_string(cfg_.head_dim()) +
                         " is above the attention kernel's limit of 256");
  if (n_moe_ > 0 && (cfg_.num_experts > 256 || cfg_.num_experts_per_tok > 64))
    throw BackendFailure("cuda: the router kernel takes at most 256 experts and 64 per token");
  if (!cuda_available()) throw BackendFailure("cuda: " + cuda_unavailable_reason());
  check(cudaSetDevice(0), "selecting device 0");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "reading the device properties");
  device_ = prop.name;
  // Programmatic dependent launch on sm_90+ (cuda_kernels.h); HL_CUDA_PDL=0 turns it off.
  const char* pdl = std::getenv("HL_CUDA_PDL");
  pdl_ = prop.major >= 9 && !(pdl && std::strcmp(pdl, "0") == 0);
  set_programmatic_launch(pdl_);
  const char* fuse = std::getenv("HL_CUDA_FUSE");
  fuse_ = !(fuse && std::strcmp(fuse, "0") == 0);
  try {
    check(cudaStreamCreateWithFlags(&st_, cudaStreamNonBlocking), "creating a stream");
    check_blas(blas_api().create(&blas_), "creating a handle");
    check_blas(blas_api().set_stream(blas_, st_), "setting the stream");
    upload_weights();
    const int64_t Di = cfg_.mamba_inner();
    mstate_ =
        DevMem(static_cast<size_t>(std::max<int64_t>(1, n_mamba_) * (cfg_.mamba_d_conv + cfg_.mamba_d_state) * Di * 4),
               "the Mamba states");
    rank1_ = DevMem(static_cast<size_t>((L + 1) * (cfg_.hidden_size + 4) * 8), "the rank-to-1 state");
    counter_ = DevMem(16, "a block counter");
    check(cudaMemsetAsync(counter_.as<void>(), 0, 16, st_), "clearing a block counter");
    params_h_ =
        Pinned(static_cast<size_t>(2 + std::max<int64_t>(copts_.max_block, 1024) + 8) * 4, "the step parameters");
    start(RunOptions{});
  } catch (...) {
    drop_graph();
    if (blas_) blas_api().destroy(blas_);
    if (st_) cudaStreamDestroy(st_);
    blas_ = nullptr;
    st_ = nullptr;
    throw;
  }
}

CudaBackend::~CudaBackend() {
  drop_graph();
  if (st_) cudaStreamSynchronize(st_);
  if (blas_) blas_api().destroy(blas_);
  if (st_) cudaStreamDestroy(st_);
}

void CudaBackend::drop_graph() {
  if (graph_exec_) cudaGraphExecDestroy(graph_exec_);
  graph_exec_ = nullptr;
  graph_gen_ = 0;
}

void CudaBackend::fail_guard() const {
  if (!failed_.empty()) throw BackendFailure(failed_ + " (the CUDA backend is disabled; use the CPU backend)");
}

DW CudaBackend::upload(const Mat& m) {
  DW d;
  d.dtype = dtype_code(m.dtype, m.name);
  d.rows = m.rows;
  d.cols = m.cols;
  if (m.empty()) return d;
  auto it = uploaded_.find({m.data, m.bytes()});
  if (it != uploaded_.end()) {
    d.p = it->second;
    return d;
  }
  DevMem mem(static_cast<size_t>(m.bytes()), "the weights (" + m.name + ")");
  check(cudaMemcpy(mem.as<void>(), m.data, static_cast<size_t>(m.bytes()), cudaMemcpyHostToDevice),
        "uploading " + m.name);
  d.p = mem.as<void>();
  uploaded_[{m.data, m.bytes()}] = d.p;
  wmem_.push_back(std::move(mem));
  wide_cap_ = std::max(wide_cap_, m.dtype == DType::F32 ? 0 : m.rows * m.cols);
  return d;
}

const float* CudaBackend::upload_vec(const std::vector<float>& v, const char* what) {
  if (v.empty()) return nullptr;
  DevMem mem(v.size() * 4, what);
  check(cudaMemcpy(mem.as<void>(), v.data(), v.size() * 4, cudaMemcpyHostToDevice), std::string("uploading ") + what);
  const float* p = mem.as<float>();
  wmem_.push_back(std::move(mem));
  return p;
}

void CudaBackend::upload_weights() {
  const ModelWeights& w = model_->w;
  const int64_t H = cfg_.hidden_size, Di = cfg_.mamba_inner(), N = cfg_.mamba_d_state;
  embed_ = upload(w.embed);
  lm_head_ = upload(w.lm_head);
  final_norm_ = upload_vec(w.final_norm, "the final norm");
  trained_ = static_cast<int64_t>(w.register_rows.size()) / H;
  std::vector<float> regs(w.register_rows);
  regs.insert(regs.end(), w.mean_embedding.begin(), w.mean_embedding.end());
  regs_ = upload_vec(regs, "the register rows");
  layers_.resize(static_cast<size_t>(cfg_.num_hidden_layers));
  for (int64_t i = 0; i < cfg_.num_hidden_layers; ++i) {
    const LayerWeights& lw = w.layers[i];
    LayerDev& d = layers_[i];
    d.in_norm = upload_vec(lw.input_norm, "a norm");
    d.ff_norm = upload_vec(lw.pre_ff_norm, "a norm");
    if (lw.is_attention) {
      d.q = upload(lw.attn.q);
      d.k = upload(lw.attn.k);
      d.v = upload(lw.attn.v);
      d.o = upload(lw.attn.o);
      d.sinks = upload_vec(lw.attn.sinks, "the sink logits");
    } else {
      const MambaWeights& m = lw.mamba;
      d.in_proj = upload(m.in_proj);
      d.x_proj = upload(m.x_proj);
      d.dt_proj = upload(m.dt_proj);
      d.out_proj = upload(m.out_proj);
      d.in_bias = upload_vec(m.in_bias, "a Mamba bias");
      d.conv_w = upload_vec(m.conv_w, "the conv weights");
      d.conv_b = upload_vec(m.conv_b, "the conv bias");
      d.dt_norm = upload_vec(m.dt_norm, "a Mamba norm");
      d.b_norm = upload_vec(m.b_norm, "a Mamba norm");
      d.c_norm = upload_vec(m.c_norm, "a Mamba norm");
      d.dt_bias = upload_vec(m.dt_bias, "the dt bias");
      std::vector<float> At(static_cast<size_t>(N * Di));  // (N, Di): channel innermost for coalesced lanes
      for (int64_t c = 0; c < Di; ++c)
        for (int64_t n = 0; n < N; ++n) At[n * Di + c] = m.A[c * N + n];
      d.A = upload_vec(At, "A");
      d.D = upload_vec(m.D, "D");
      d.out_bias = upload_vec(m.out_bias, "a Mamba bias");
    }
    std::vector<const MlpWeights*> mlps;
    if (lw.is_moe) {
      d.router = upload(lw.moe.router);
      for (const MlpWeights& e : lw.moe.experts) mlps.push_back(&e);
    } else {
      mlps.push_back(&lw.mlp);
    }
    std::vector<ExpertW> table;
    for (const MlpWeights* m : mlps) {
      MlpDev md{upload(m->gate), upload(m->up), upload(m->down)};
      d.mlps.push_back(md);
      table.push_back(ExpertW{md.gate.p, md.up.p, md.down.p, md.gate.dtype, md.up.dtype, md.down.dtype});
    }
    DevMem tm(table.size() * sizeof(ExpertW), "the expert table");
    check(cudaMemcpy(tm.as<void>(), table.data(), table.size() * sizeof(ExpertW), cudaMemcpyHostToDevice),
          "uploading the expert table");
    d.table = tm.as<ExpertW>();
    wmem_.push_back(std::move(tm));
  }
  wide_cap_ = std::min<int64_t>(wide_cap_, int64_t{32} << 20);  // ≤ 128 MiB of widened panel
}

void CudaBackend::plan_records() {
  const int64_t L = cfg_.num_hidden_layers, V = cfg_.vocab_size, nh = cfg_.num_attention_heads;
  const int64_t E = cfg_.num_experts, K = cfg_.num_experts_per_tok, Di = cfg_.mamba_inner();
  RecLayout r;
  int64_t o = 0;
  auto take = [&](int64_t* at, int64_t n) {
    *at = o;
    o += n;
  };
  take(&r.logits, V);
  take(&r.nonfinite, L + 1);
  if (opts_.instruments) {
    take(&r.resid_max, L + 1);
    take(&r.rank1, L + 1);
    take(&r.attn, 4 * n_attn_ * nh);
    take(&r.dmean, n_mamba_);
    take(&r.rprobs, n_moe_ * E);
    take(&r.rtopk, n_moe_ * K);
    take(&r.rlse, n_moe_);
    if (opts_.full) {
      take(&r.sdelta, n_mamba_ * Di);
      take(&r.sret, n_mamba_ * Di);
      r.arow_stride = kv_cap_ + 1;
      take(&r.arows, n_attn_ * nh * r.arow_stride);
    }
  }
  r.stride = (o + 3) / 4 * 4;
  rl_ = r;
}

int64_t CudaBackend::block_limit() const {
  int64_t lim = std::max<int64_t>(1, copts_.max_block);
  // The attention scratch (S·nh rows of 2·kv_cap floats) and the records stay under 1 GiB each.
  const int64_t z_row = n_attn_ > 0 ? cfg_.num_attention_heads * 2 * kv_cap_ * 4 : 1;
  lim = std::min(lim, std::max<int64_t>(1, (int64_t{1} << 30) / z_row));
  lim = std::min(lim, std::max<int64_t>(1, (int64_t{1} << 30) / (rl_.stride * 4)));
  return lim;
}

void CudaBackend::ensure_kv(int64_t rows) {
  if (rows <= kv_cap_) return;
  const int64_t cap = std::max(rows, 2 * kv_cap_);
  const int64_t kvw = cfg_.num_key_value_heads * cfg_.head_dim();
  std::vector<DevMem> k, v;
  for (int64_t a = 0; a < n_attn_; ++a) {
    k.emplace_back(static_cast<size_t>(cap * kvw * 4), "the key cache");
    v.emplace_back(static_cast<size_t>(cap * kvw * 4), "the value cache");
    if (kv_len_ > 0) {
      check(cudaMemcpyAsync(k[a].as<void>(), kcache_[a].as<void>(), static_cast<size_t>(kv_len_ * kvw * 4),
                            cudaMemcpyDeviceToDevice, st_),
            "growing the KV cache");
      check(cudaMemcpyAsync(v[a].as<void>(), vcache_[a].as<void>(), static_cast<size_t>(kv_len_ * kvw * 4),
                            cudaMemcpyDeviceToDevice, st_),
            "growing the KV cache");
    }
  }
  sync("growing the KV cache");
  kcache_ = std::move(k);
  vcache_ = std::move(v);
  kv_cap_ = cap;
  plan_records();  // the attention rows of full traces are as wide as the cache
  cap_ = 0;        // the attention scratch is as wide as the cache: reallocate the block buffers
  ++gen_;
}

void CudaBackend::ensure_block(int64_t S) {
  if (S <= cap_ && rl_.stride == rec_alloc_stride_) return;
  int64_t cap = 1;
  while (cap < std::max(S, cap_)) cap *= 2;
  cap = std::max(S, std::min(cap, block_limit()));
  const int64_t H = cfg_.hidden_size, Di = cfg_.mamba_inner(), I = cfg_.intermediate_size, L = cfg_.num_hidden_layers;
  const int64_t E = cfg_.num_experts, K = cfg_.num_experts_per_tok, R = cfg_.mamba_dt_rank, N = cfg_.mamba_d_state;
  const int64_t nh = cfg_.num_attention_heads, qw = nh * cfg_.head_dim();
  const bool A = n_attn_ > 0, M = n_mamba_ > 0, X = n_moe_ > 0;
  const int64_t chunks = (cap + copts_.scan_chunk - 1) / copts_.scan_chunk;
  zstride_ = 2 * kv_cap_;
  struct Part {
    float** at;
    int64_t n;
  };
  const Part parts[] = {{&h_, cap * H},
                        {&x_, cap * H},
                        {&y_, cap * H},
                        {&q_, A ? cap * qw : 0},
                        {&o_, A ? cap * qw : 0},
                        {&z_, A ? cap * nh * zstride_ : 0},
                        {&xz_, M ? cap * 2 * Di : 0},
                        {&u_, M ? cap * Di : 0},
                        {&p_, M ? cap * (R + 2 * N) : 0},
                        {&dtr_, M ? cap * R : 0},
                        {&bm_, M ? cap * N : 0},
                        {&cm_, M ? cap * N : 0},
                        {&gated_, M ? cap * Di : 0},
                        {&dt_, n_mamba_ * cap * Di},
                        {&ret_, opts_.full ? n_mamba_ * cap * Di : 0},
                        {&sc_local_, M && chunks > 1 ? chunks * N * Di : 0},
                        {&sc_prod_, M && chunks > 1 ? chunks * N * Di : 0},
                        {&sc_carry_, M && chunks > 1 ? chunks * N * Di : 0},
                        {&g_, std::max(cap, K) * I},
                        {&uf_, cap * I},
                        {&xe_, X ? cap * H : 0},
                        {&ye_, X ? cap * H : 0},
                        {&probs_, X ? cap * E : 0},
                        {&selw_, X ? cap * K : 0},
                        {&rows_, opts_.instruments ? (L + 1) * cap * H : 0}};
  int64_t total = 0;
  for (const Part& p : parts) total += (p.n + 63) / 64 * 64;  // 256-byte aligned parts
  total += X ? (cap * K + 63) / 64 * 64 : 0;                  // sel (int32)
  // Free first, then allocate the larger buffers.
  act_.reset();
  rec_d_.reset();
  cap_ = 0;
  drop_graph();
  act_ = DevMem(static_cast<size_t>(total * 4), "the activations (" + std::to_string(cap) + " tokens)");
  float* base = act_.as<float>();
  for (const Part& p : parts) {
    *p.at = p.n ? base : nullptr;
    base += (p.n + 63) / 64 * 64;
  }
  sel_ = X ? reinterpret_cast<int32_t*>(base) : nullptr;
  rec_d_ = DevMem(static_cast<size_t>(cap * rl_.stride * 4), "the per-token records");
  rec_h_ = Pinned(static_cast<size_t>(cap * rl_.stride * 4), "the records' readback");
  if (!params_d_.bytes() || params_d_.bytes() < static_cast<size_t>((2 + cap) * 4)) {
    params_d_ = DevMem(static_cast<size_t>((2 + std::max<int64_t>(cap, 1024)) * 4), "the step parameters");
    params_h_ = Pinned(static_cast<size_t>((2 + std::max<int64_t>(cap, 1024)) * 4), "the step parameters");
  }
  if (X) {
    route_h_ = Pinned(static_cast<size_t>(cap * K * 8), "the routing readback");
    idx_d_ = DevMem(static_cast<size_t>(2 * cap * K * 4 + 256), "the expert rows");
    idx_h_ = Pinned(static_cast<size_t>(2 * cap * K * 4 + 256), "the expert rows");
  }
  if (cap > 1 && wide_cap_ > 0 && !wide_.bytes())
    wide_ = DevMem(static_cast<size_t>(wide_cap_ * 4), "the widened weight panels");
  cap_ = cap;
  rec_alloc_stride_ = rl_.stride;
  ++gen_;
}

void CudaBackend::sync(const char* what) {
  check(cudaStreamSynchronize(st_), what);
  check(cudaGetLastError(), what);
}

void CudaBackend::start(const RunOptions& opts) {
  fail_guard();
  const int64_t L = cfg_.num_hidden_layers;
  if (opts.registers > 1024) throw Error("registers: " + std::to_string(opts.registers) + " is out of range [0, 1024]");
  const bool layout_changes = opts.instruments != opts_.instruments || opts.full != opts_.full;
  opts_ = opts;
  n_reg_ = opts.registers < 0 ? static_cast<int>(trained_) : opts.registers;
  position_ = 0;
  kv_len_ = 0;
  norm_.assign(static_cast<size_t>(n_attn_), 0);
  for (int64_t i = 0; i < L; ++i) {
    const LayerWeights& lw = model_->w.layers[i];
    if (!lw.is_attention) continue;
    const bool has_sinks = !lw.attn.sinks.empty();
    const Normalizer n = opts.normalizer_override ? opts.normalizer
                         : has_sinks              ? Normalizer::Sink
                                                  : cfg_.attention_normalizer;
    norm_[kind_index_[i]] = static_cast<int>(n);
  }
  std::vector<int> baked = norm_;
  baked.push_back(opts_.instruments);
  baked.push_back(opts_.full);
  if (baked != baked_) ++gen_;  // the options are baked into the captured step
  baked_ = baked;
  try {
    if (layout_changes) cap_ = 0;  // the block buffers depend on instruments/full
    ensure_kv(n_reg_ + 256);
    plan_records();
    ensure_block(1);
    check(cudaMemsetAsync(mstate_.as<void>(), 0, mstate_.bytes(), st_), "clearing the Mamba state");
    check(cudaMemsetAsync(rank1_.as<void>(), 0, rank1_.bytes(), st_), "clearing the rank-to-1 state");
    // Registers: trained rows first, then the mean embedding row (row `trained` of regs_).
    feed_registers(
        n_reg_, trained_, [&] { return block_limit(); }, [&](int64_t n) { ensure_block(n); },
        [&](const int32_t* ids, int64_t n) {
          run_block(ids, n, false);
          kv_len_ += n;
        });
    sync("clearing the state");
    capture_decode();
  } catch (const BackendFailure& e) {
    failed_ = e.what();
    throw;
  }
}

void CudaBackend::gemv(std::initializer_list<GemvSeg> segs, const float* x, int epi, const Tail& t) {
  GemvArgs a;
  a.nseg = 0;
  for (const GemvSeg& s : segs) a.seg[a.nseg++] = s;
  a.x = x;
  a.epi = epi;
  a.tail = t;
  a.params = params_d_.as<int32_t>();
  launch_gemv(a, st_);
  ++launches_;
}

// Y (S, W.rows) with row stride ldy = X (S, W.cols) · Wᵀ in fp32 (cuBLAS column-major: Yᵀ = W·Xᵀ).
void CudaBackend::gemm(const DW& W, const float* X, int64_t S, float* Y, int64_t ldy) {
  const float one = 1.0f, zero = 0.0f;
  const int64_t cols = W.cols;
  auto run = [&](const float* A, int64_t r0, int64_t n) {
    check_blas(blas_api().gemm_ex(blas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(S),
                                  static_cast<int>(cols), &one, A, CUDA_R_32F, static_cast<int>(cols), X, CUDA_R_32F,
                                  static_cast<int>(cols), &zero, Y + r0, CUDA_R_32F, static_cast<int>(ldy),
                                  CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT),
               "GemmEx");
    ++launches_;
  };
  if (W.dtype == cudam::kF32) {
    run(static_cast<const float*>(W.p), 0, W.rows);
    return;
  }
  const int64_t panel = std::max<int64_t>(1, wide_cap_ / cols);
  for (int64_t r0 = 0; r0 < W.rows; r0 += panel) {
    const int64_t n = std::min(panel, W.rows - r0);
    launch_widen(static_cast<const char*>(W.p) + r0 * cols * 2, W.dtype, wide_.as<float>(), n * cols, st_);
    ++launches_;
    run(wide_.as<float>(), r0, n);
  }
}

ResidArgs CudaBackend::resid_args(int64_t S, bool add_y, int column, const float* norm_w, float* rec,
                                  int64_t moe_layer) const {
  ResidArgs a;
  a.h = h_;
  a.y = add_y ? y_ : nullptr;
  a.H = cfg_.hidden_size;
  a.S = static_cast<int>(S);
  a.column = column;
  a.rec = rec;
  a.rec_stride = rl_.stride;
  a.off_nonfinite = rl_.nonfinite;
  a.off_resid_max = rl_.resid_max;
  a.instruments = opts_.instruments;
  a.rows = rows_;
  a.cap = cap_;
  a.norm_w = norm_w;
  a.x = x_;
  a.eps = cfg_.rms_norm_eps;
  if (moe_layer >= 0) {
    a.router = layers_[moe_layer].router;
    a.E = static_cast<int>(cfg_.num_experts);
    a.K = static_cast<int>(cfg_.num_experts_per_tok);
    a.xi = static_cast<int>(moe_index_[moe_layer]);
    a.probs = probs_;
    a.sel = sel_;
    a.selw = selw_;
    a.router_rec = rec && opts_.instruments ? rec : nullptr;
    a.off_probs = rl_.rprobs;
    a.off_topk = rl_.rtopk;
    a.off_lse = rl_.rlse;
  }
  return a;
}

void CudaBackend::resid(int64_t S, bool add_y, int column, const float* norm_w, float* rec, int64_t moe_layer) {
  const ResidArgs a = resid_args(S, add_y, column, norm_w, rec, moe_layer);
  launch_resid(a, st_);
  ++launches_;
}

void CudaBackend::attention(int64_t layer, int64_t S, float* rec) {
  const LayerDev& d = layers_[layer];
  const int64_t ai = kind_index_[layer];
  const int64_t nh = cfg_.num_attention_heads, nkv = cfg_.num_key_value_heads, hd = cfg_.head_dim();
  const int64_t kvw = nkv * hd;
  float* kc = kcache_[ai].as<float>();
  float* vc = vcache_[ai].as<float>();
  if (S == 1) {
    gemv({{d.q, q_, 0, nullptr}, {d.k, kc, kvw, nullptr}, {d.v, vc, kvw, nullptr}}, x_, 0);
  } else {
    gemm(d.q, x_, S, q_, nh * hd);
    gemm(d.k, x_, S, kc + kv_len_ * kvw, kvw);
    gemm(d.v, x_, S, vc + kv_len_ * kvw, kvw);
  }
  AttnArgs a;
  a.q = q_;
  a.kc = kc;
  a.vc = vc;
  a.nh = static_cast<int>(nh);
  a.group = static_cast<int>(nh / nkv);
  a.hd = static_cast<int>(hd);
  a.kvw = static_cast<int>(kvw);
  a.params = params_d_.as<int32_t>();
  a.S = static_cast<int>(S);
  a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  a.norm = norm_[ai];
  a.sinks = norm_[ai] == static_cast<int>(Normalizer::Sink) ? d.sinks : nullptr;
  a.o = o_;
  a.z = z_;
  a.zstride = zstride_;
  a.rec = rec;
  a.rec_stride = rl_.stride;
  a.off_attn = rl_.attn;
  a.an = n_attn_ * nh;
  a.slot0 = ai * nh;
  a.off_rows = rl_.arows;
  a.row_stride = rl_.arow_stride;
  a.instruments = opts_.instruments;
  a.full = opts_.instruments && opts_.full;
  launch_attention(a, st_);
  ++launches_;
  if (S == 1) {
    gemv({{d.o, h_, 0, nullptr}}, o_, 1, tail_);  // h += o·Woᵀ, then the norm
  } else {
    gemm(d.o, o_, S, y_, cfg_.hidden_size);
  }
}

void CudaBackend::mamba(int64_t layer, int64_t S, float* rec) {
  const LayerDev& d = layers_[layer];
  const int64_t mi = kind_index_[layer];
  const int64_t Di = cfg_.mamba_inner(), N = cfg_.mamba_d_state, W = cfg_.mamba_d_conv, R = cfg_.mamba_dt_rank;
  const int64_t H = cfg_.hidden_size;
  float* win = mstate_.as<float>() + mi * (W + N) * Di;
  float* hs = win + W * Di;
  float* dt = dt_ + mi * cap_ * Di;
  const bool full = rec && opts_.instruments && opts_.full;
  const bool fused = S == 1 && R + 2 * N <= kMaxStepRank;
  if (fused) {  // in_proj with the conv in its epilogue, x_proj, then norms + Δ + scan in one kernel
    GemvArgs g;
    g.seg[0] = GemvSeg{d.in_proj, xz_, 0, d.in_bias};
    g.x = x_;
    g.epi = 3;
    g.params = params_d_.as<int32_t>();
    g.conv = ConvEpi{win, d.conv_w, d.conv_b, u_, Di, static_cast<int>(W)};
    launch_gemv(g, st_);
    gemv({{d.x_proj, p_, 0, nullptr}}, u_, 0);
    StepArgs m;
    m.p = p_;
    m.wdt = d.dt_norm;
    m.wb = d.b_norm;
    m.wc = d.c_norm;
    m.dt_proj = d.dt_proj;
    m.dt_bias = d.dt_bias;
    m.A = d.A;
    m.D = d.D;
    m.z = xz_ + Di;
    m.u = u_;
    m.h = hs;
    m.dt = dt;
    m.out = gated_;
    m.retained = full ? ret_ + mi * cap_ * Di : nullptr;
    m.R = static_cast<int>(R);
    m.N = static_cast<int>(N);
    m.Di = Di;
    m.eps = cfg_.rms_norm_eps;
    launch_mamba_step(m, st_);
    launches_ += 2;
    gemv({{d.out_proj, h_, 0, d.out_bias}}, gated_, 1, tail_);  // h += gated·Woutᵀ + bias, then the norm
    return;
  }
  if (S == 1) {
    gemv({{d.in_proj, xz_, 0, d.in_bias}}, x_, 0);
  } else {
    gemm(d.in_proj, x_, S, xz_, 2 * Di);
    if (d.in_bias) {
      launch_add_bias(xz_, d.in_bias, static_cast<int>(S), 2 * Di, st_);
      ++launches_;
    }
  }
  launch_conv(xz_, win, d.conv_w, d.conv_b, u_, static_cast<int>(S), Di, static_cast<int>(W), st_);
  ++launches_;
  if (S == 1)
    gemv({{d.x_proj, p_, 0, nullptr}}, u_, 0);
  else
    gemm(d.x_proj, u_, S, p_, R + 2 * N);
  launch_xnorms(p_, dtr_, bm_, cm_, d.dt_norm, d.b_norm, d.c_norm, static_cast<int>(S), static_cast<int>(R),
                static_cast<int>(N), cfg_.rms_norm_eps, st_);
  ++launches_;
  if (S == 1) {
    gemv({{d.dt_proj, dt, 0, d.dt_bias}}, dtr_, 2);  // Δ = softplus(dt_r·dt_projᵀ + bias)
  } else {
    gemm(d.dt_proj, dtr_, S, dt, Di);
    launch_bias_softplus(dt, d.dt_bias, static_cast<int>(S), Di, st_);
    ++launches_;
  }
  ScanArgs a;
  a.dt = dt;
  a.u = u_;
  a.z = xz_ + Di;
  a.zs = 2 * Di;
  a.B = bm_;
  a.C = cm_;
  a.A = d.A;
  a.D = d.D;
  a.h = hs;
  a.out = gated_;
  a.retained = full ? ret_ + mi * cap_ * Di : nullptr;
  a.S = static_cast<int>(S);
  a.N = static_cast<int>(N);
  a.Di = Di;
  if (S <= copts_.scan_chunk) {
    launch_scan(a, st_);
    ++launches_;
  } else {
    launch_scan_chunked(a, copts_.scan_chunk, sc_local_, sc_prod_, sc_carry_, st_);
    launches_ += 3;
  }
  if (S == 1) {
    gemv({{d.out_proj, h_, 0, d.out_bias}}, gated_, 1, tail_);  // h += gated·Woutᵀ + bias, then the norm
  } else {
    gemm(d.out_proj, gated_, S, y_, H);
    if (d.out_bias) {
      launch_add_bias(y_, d.out_bias, static_cast<int>(S), H, st_);
      ++launches_;
    }
  }
}

void CudaBackend::feed_forward(int64_t layer, int64_t S, float* rec) {
  const LayerDev& d = layers_[layer];
  const int64_t H = cfg_.hidden_size, I = cfg_.intermediate_size;
  const bool moe = moe_index_[layer] >= 0;
  if (!moe) {
    if (S == 1) {
      launch_glu(d.table, nullptr, 1, I, H, x_, g_, st_);
      launch_down(d.table, nullptr, nullptr, 1, H, I, g_, h_, tail_, st_);
      launches_ += 2;
    } else {
      const MlpDev& m = d.mlps[0];
      gemm(m.gate, x_, S, g_, I);
      gemm(m.up, x_, S, uf_, I);
      launch_silu_mul(g_, uf_, S * I, st_);
      ++launches_;
      gemm(m.down, g_, S, y_, H);
    }
    return;
  }
  // The router ran in the norm before (resid with moe_layer): probs_, sel_, selw_ and the record.
  const int64_t E = cfg_.num_experts, K = cfg_.num_experts_per_tok;
  (void)rec;
  if (S == 1) {  // experts chosen on the device, in ascending index, weighted by their probabilities
    launch_glu(d.table, sel_, static_cast<int>(K), I, H, x_, g_, st_);
    launch_down(d.table, sel_, selw_, static_cast<int>(K), H, I, g_, h_, tail_, st_);
    launches_ += 2;
    return;
  }
  // Prefill: the routing to the host, then each chosen expert once on the rows that chose it.
  int32_t* sel_h = route_h_.as<int32_t>();
  float* selw_h = reinterpret_cast<float*>(sel_h + S * K);
  check(cudaMemcpyAsync(sel_h, sel_, static_cast<size_t>(S * K * 4), cudaMemcpyDeviceToHost, st_),
        "reading the routing");
  check(cudaMemcpyAsync(selw_h, selw_, static_cast<size_t>(S * K * 4), cudaMemcpyDeviceToHost, st_),
        "reading the routing");
  sync("reading the routing");
  int32_t* list = idx_h_.as<int32_t>();  // per expert: rows, then weights (as float bits)
  std::vector<int64_t> first(static_cast<size_t>(E) + 1, 0);
  int64_t o = 0;
  for (int64_t e = 0; e < E; ++e) {
    first[e] = o;
    for (int64_t s = 0; s < S; ++s)
      for (int64_t k = 0; k < K; ++k)
        if (sel_h[s * K + k] == e) list[o++] = static_cast<int32_t>(s);
  }
  first[E] = o;
  float* wl = reinterpret_cast<float*>(list + o);
  for (int64_t e = 0, j = 0; e < E; ++e)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t k = 0; k < K; ++k)
        if (sel_h[s * K + k] == e) wl[j++] = selw_h[s * K + k];
  check(cudaMemcpyAsync(idx_d_.as<void>(), list, static_cast<size_t>(2 * o * 4), cudaMemcpyHostToDevice, st_),
        "uploading the expert rows");
  check(cudaMemsetAsync(y_, 0, static_cast<size_t>(S * H * 4), st_), "clearing the expert sum");
  const int32_t* rows_d = idx_d_.as<int32_t>();
  const float* w_d = reinterpret_cast<const float*>(rows_d + o);
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = first[e + 1] - first[e];
    if (n == 0) continue;
    const MlpDev& m = d.mlps[e];
    launch_gather(x_, rows_d + first[e], static_cast<int>(n), H, xe_, st_);
    gemm(m.gate, xe_, n, g_, I);
    gemm(m.up, xe_, n, uf_, I);
    launch_silu_mul(g_, uf_, n * I, st_);
    gemm(m.down, g_, n, ye_, H);
    launch_scatter(y_, rows_d + first[e], w_d + first[e], static_cast<int>(n), H, ye_, st_);
    launches_ += 3;
  }
  // The host buffers are reused by the next MoE layer: its copies come after this layer's uploads.
  sync("running the experts");
}

void CudaBackend::enqueue(int64_t S, bool records) {
  const int64_t L = cfg_.num_hidden_layers, H = cfg_.hidden_size;
  float* rec = records ? rec_d_.as<float>() : nullptr;
  check(cudaMemcpyAsync(params_d_.as<void>(), params_h_.as<void>(), static_cast<size_t>((2 + S) * 4),
                        cudaMemcpyHostToDevice, st_),
        "uploading the step parameters");
  // Decode: the products accumulate into h and (fuse_) run the next norm themselves.
  const bool decode = S == 1, fused = decode && fuse_;
  if (fused) {
    const Tail first = tail(resid_args(1, false, 0, layers_[0].in_norm, rec, -1));
    launch_embed(embed_, regs_, params_d_.as<int32_t>(), 1, h_, first, st_);
    ++launches_;
  } else {
    launch_embed(embed_, regs_, params_d_.as<int32_t>(), static_cast<int>(S), h_, Tail{}, st_);
    ++launches_;
    resid(S, false, 0, layers_[0].in_norm, rec);
  }
  for (int64_t i = 0; i < L; ++i) {
    const int64_t moe = moe_index_[i] >= 0 ? i : -1;
    const float* next_norm = i + 1 < L ? layers_[i + 1].in_norm : final_norm_;
    tail_ = fused ? tail(resid_args(1, false, -1, layers_[i].ff_norm, rec, moe)) : Tail{};
    if (cfg_.is_attention_layer(i))
      attention(i, S, rec);
    else
      mamba(i, S, rec);
    if (!fused) resid(S, !decode, -1, layers_[i].ff_norm, rec, moe);
    tail_ = fused ? tail(resid_args(1, false, static_cast<int>(i + 1), next_norm, rec, -1)) : Tail{};
    feed_forward(i, S, rec);
    if (!fused) resid(S, !decode, static_cast<int>(i + 1), next_norm, rec);
  }
  tail_ = Tail{};
  if (!records) return;
  if (S == 1)
    gemv({{lm_head_, rec + rl_.logits, 0, nullptr}}, x_, 0);
  else
    gemm(lm_head_, x_, S, rec + rl_.logits, rl_.stride);
  if (opts_.instruments) {
    launch_rank1(rows_, static_cast<int>(L + 1), cap_, static_cast<int>(S), H, rank1_.as<double>(), rec, rl_.stride,
                 rl_.rank1, st_);
    ++launches_;
    if (n_mamba_ > 0) {
      launch_mamba_stats(dt_, ret_, static_cast<int>(n_mamba_), cap_, static_cast<int>(S), cfg_.mamba_inner(), rec,
                         rl_.stride, rl_.dmean, rl_.sdelta, rl_.sret, opts_.full, st_);
      ++launches_;
    }
  }
  check(cudaMemcpyAsync(rec_h_.as<void>(), rec, static_cast<size_t>(S * rl_.stride * 4), cudaMemcpyDeviceToHost, st_),
        "reading the records");
}

// Captures the decode step (parameters in, every kernel, the record out) as a graph when the one
// held is stale; capture runs nothing, so start() does it ahead of the first step. A capture that
// fails leaves plain launches for the rest of the backend's life.
void CudaBackend::capture_decode() {
  if (!copts_.graphs || (graph_exec_ && graph_gen_ == gen_)) return;
  drop_graph();
  ensure_block(1);
  const int64_t before = launches_;
  cudaGraph_t graph = nullptr;
  bool ok = cudaStreamBeginCapture(st_, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
  if (ok) {
    try {
      enqueue(1, true);
    } catch (const BackendFailure&) {
      cudaStreamEndCapture(st_, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    ok = cudaStreamEndCapture(st_, &graph) == cudaSuccess && graph;
  }
  if (ok) ok = cudaGraphInstantiate(&graph_exec_, graph, 0) == cudaSuccess;
  if (graph) cudaGraphDestroy(graph);
  if (!ok) {
    cudaGetLastError();
    graph_exec_ = nullptr;
    copts_.graphs = false;
    return;
  }
  graph_gen_ = gen_;
  kernels_per_token_ = launches_ - before;
}

void CudaBackend::run_block(const int32_t* ids, int64_t S, bool records) {
  if (g_fail_after.load() >= 0 && g_fail_after.fetch_sub(1) == 0)
    throw BackendFailure("cuda: an unrecoverable device error (simulated; HL_CUDA_FAIL_AFTER)");
  int32_t* p = params_h_.as<int32_t>();  // (2 + S,): cached positions, S, ids
  p[0] = static_cast<int32_t>(kv_len_);
  p[1] = static_cast<int32_t>(S);
  std::memcpy(p + 2, ids, static_cast<size_t>(S) * 4);
  const int64_t before = launches_;
  if (S == 1 && records && copts_.graphs) {
    capture_decode();
    if (graph_exec_) {
      check(cudaGraphLaunch(graph_exec_, st_), "launching the decode graph");
      sync("running the model");
      return;
    }
  }
  enqueue(S, records);
  if (S == 1 && records) kernels_per_token_ = launches_ - before;
  sync(records ? "running the model" : "feeding the registers");
}

void CudaBackend::read_records(int64_t S, TokenTrace* recs) const {
  const float* base = rec_h_.as<float>();
  const int64_t L = cfg_.num_hidden_layers;
  const size_t an = static_cast<size_t>(n_attn_ * cfg_.num_attention_heads);
  auto copy = [](const float* src, std::vector<float>& dst) {
    if (!dst.empty()) std::memcpy(dst.data(), src, dst.size() * 4);
  };
  for (int64_t s = 0; s < S; ++s) {
    const float* r = base + s * rl_.stride;
    TokenTrace& t = recs[s];
    copy(r + rl_.logits, t.logits);
    for (int64_t c = 1; c <= L; ++c)
      if (r[rl_.nonfinite + c] != 0.0f) {
        t.nonfinite_layer = static_cast<int32_t>(c - 1);
        break;
      }
    if (!opts_.instruments) continue;
    copy(r + rl_.resid_max, t.resid_max_abs);
    copy(r + rl_.rank1, t.rank1_distance);
    copy(r + rl_.attn, t.attn_entropy);
    copy(r + rl_.attn + an, t.attn_entropy_norm);
    copy(r + rl_.attn + 2 * an, t.attn_mass);
    copy(r + rl_.attn + 3 * an, t.attn_max_logit);
    copy(r + rl_.dmean, t.ssm_delta_mean);
    copy(r + rl_.rprobs, t.router_probs);
    if (!t.router_topk.empty()) std::memcpy(t.router_topk.data(), r + rl_.rtopk, t.router_topk.size() * 4);
    copy(r + rl_.rlse, t.router_lse);
    if (!opts_.full) continue;
    copy(r + rl_.sdelta, t.ssm_delta);
    copy(r + rl_.sret, t.ssm_retained);
    const size_t row = static_cast<size_t>(n_reg_ + t.position + 2);  // keys, then p_null
    for (size_t slot = 0; slot < an; ++slot)
      std::memcpy(&t.attn_rows[slot * row], r + rl_.arows + static_cast<int64_t>(slot) * rl_.arow_stride, row * 4);
  }
}

void CudaBackend::forward(const int32_t* tokens, int64_t S, std::vector<TokenTrace>* out) {
  fail_guard();
  forward_in_blocks(
      tokens, S, out, cfg_, opts_, TraceShape{n_attn_, n_mamba_, n_moe_, n_reg_}, position_, failed_,
      [&](int64_t total) { ensure_kv(kv_len_ + total); }, [&] { return block_limit(); },
      [&](int64_t n) { ensure_block(n); },
      [&](const int32_t* ids, int64_t n, TokenTrace* recs) {
        run_block(ids, n, true);
        read_records(n, recs);
        kv_len_ += n;
      });
}

}  // namespace
}  // namespace hl::cuda

namespace hl {

namespace {

struct Probe {
  bool ok = false;
  std::string reason;
};

const Probe& probe() {
  static const Probe p = [] {
    Probe r;
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      cudaGetLastError();
      r.reason = std::string("no usable CUDA device (") + cudaGetErrorString(e) + ")";
    } else if (n <= 0) {
      r.reason = "no CUDA device found";
    } else {
      r.ok = true;
    }
    return r;
  }();
  return p;
}

}  // namespace

bool cuda_available() {
  return probe().ok;
}

std::string cuda_unavailable_reason() {
  return probe().reason;
}

std::unique_ptr<Backend> make_cuda_backend(std::shared_ptr<const Model> model, const CudaOptions& opts) {
  if (!cuda_available()) throw BackendFailure("cuda: " + cuda_unavailable_reason());
  return std::make_unique<cuda::CudaBackend>(std::move(model), opts);
}

bool cuda_step_info(const Backend& b, CudaStepInfo* out) {
  const auto* c = dynamic_cast<const cuda::CudaBackend*>(&b);
  if (!c) return false;
  *out = c->step_info();
  return true;
}

void cuda_simulate_failure(int64_t steps) {
  cuda::g_fail_after = steps;
}

namespace {
const bool g_env_fail = [] {
  if (const char* e = std::getenv("HL_CUDA_FAIL_AFTER")) cuda::g_fail_after = std::atoll(e);
  return true;
}();
}  // namespace

CudaDeviceFigures cuda_measure_device() {
  using cuda::check;
  if (!cuda_available()) throw BackendFailure("cuda: " + cuda_unavailable_reason());
  CudaDeviceFigures f;
  check(cudaSetDevice(0), "selecting device 0");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "reading the device properties");
  f.device = prop.name;
  f.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  cudaStream_t st = nullptr;
  check(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "creating a stream");
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  check(cudaEventCreate(&e0), "creating an event");
  check(cudaEventCreate(&e1), "creating an event");
  auto elapsed_ms = [&] {
    float ms = 0;
    check(cudaEventSynchronize(e1), "timing");
    check(cudaEventElapsedTime(&ms, e0, e1), "timing");
    return static_cast<double>(ms);
  };
  {                                        // Bandwidth: a 1 GiB copy (read + write), best of 5.
    const int64_t n = int64_t{128} << 20;  // floats per buffer (512 MiB)
    cuda::DevMem a(static_cast<size_t>(n * 4), "the bandwidth probe");
    cuda::DevMem b(static_cast<size_t>(n * 4), "the bandwidth probe");
    check(cudaMemsetAsync(a.as<void>(), 0, static_cast<size_t>(n * 4), st), "clearing the probe");
    cuda::launch_copy(a.as<float>(), b.as<float>(), n, st);
    double best = 1e30;
    for (int r = 0; r < 5; ++r) {
      check(cudaEventRecord(e0, st), "timing");
      cuda::launch_copy(a.as<float>(), b.as<float>(), n, st);
      check(cudaEventRecord(e1, st), "timing");
      best = std::min(best, elapsed_ms());
    }
    f.copy_gb_s = 2.0 * static_cast<double>(n) * 4 / (best * 1e-3) / 1e9;
  }
  {  // Launch cost: 1000 empty kernels on the stream, and captured in a graph.
    const int kN = 1000;
    for (int i = 0; i < kN; ++i) cuda::launch_empty(st);
    check(cudaEventRecord(e0, st), "timing");
    for (int i = 0; i < kN; ++i) cuda::launch_empty(st);
    check(cudaEventRecord(e1, st), "timing");
    f.launch_us_stream = elapsed_ms() * 1e3 / kN;
    cudaGraph_t g = nullptr;
    cudaGraphExec_t ge = nullptr;
    check(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), "capturing a graph");
    for (int i = 0; i < kN; ++i) cuda::launch_empty(st);
    check(cudaStreamEndCapture(st, &g), "capturing a graph");
    check(cudaGraphInstantiate(&ge, g, 0), "instantiating a graph");
    check(cudaGraphLaunch(ge, st), "launching a graph");
    double best = 1e30;
    for (int r = 0; r < 5; ++r) {
      check(cudaEventRecord(e0, st), "timing");
      check(cudaGraphLaunch(ge, st), "launching a graph");
      check(cudaEventRecord(e1, st), "timing");
      best = std::min(best, elapsed_ms());
    }
    f.launch_us_graph = best * 1e3 / kN;
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
  }
  check(cudaStreamSynchronize(st), "the device figures");
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(st);
  return f;
}

}  // namespace hl
