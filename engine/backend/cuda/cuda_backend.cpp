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
#include "engine/backend/cuda/cuda_backend_impl.h"
#include "engine/backend/run_plan.h"

namespace hl::cuda {

CudaBackend::CudaBackend(std::shared_ptr<const Model> model, const CudaOptions& opts)
    : model_(std::move(model)), cfg_(model_->config), copts_(opts), sched_(model_->schedule) {
  if (const char* g = std::getenv("HL_CUDA_GRAPHS"); g && std::strcmp(g, "0") == 0) copts_.graphs = false;
  const int64_t L = cfg_.num_hidden_layers;
  if (sched_.num_attention() > 0 && cfg_.head_dim() > 256)
    throw BackendFailure("cuda: head_dim " + std::to_string(cfg_.head_dim()) +
                         " is above the attention kernel's limit of 256");
  if (sched_.num_moe() > 0 && (cfg_.num_experts > 256 || cfg_.num_experts_per_tok > 64))
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
        DevMem(static_cast<size_t>(std::max<int64_t>(1, sched_.num_ssm()) * (cfg_.mamba_d_conv + cfg_.mamba_d_state) * Di * 4),
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
    if (sched_[i].has_attention()) {
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
    if (sched_[i].is_moe()) {
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
  rl_ = plan_device_record<int64_t>(cfg_, sched_.num_attention(), sched_.num_ssm(), sched_.num_moe(), opts_, kv_cap_, false, 4);
}

int64_t CudaBackend::block_limit() const {
  int64_t lim = std::max<int64_t>(1, copts_.max_block);
  // The attention scratch (S·nh rows of 2·kv_cap floats) and the records stay under 1 GiB each.
  const int64_t z_row = sched_.num_attention() > 0 ? cfg_.num_attention_heads * 2 * kv_cap_ * 4 : 1;
  lim = std::min(lim, std::max<int64_t>(1, (int64_t{1} << 30) / z_row));
  lim = std::min(lim, std::max<int64_t>(1, (int64_t{1} << 30) / (rl_.stride * 4)));
  return lim;
}

void CudaBackend::ensure_kv(int64_t rows) {
  if (rows <= kv_cap_) return;
  const int64_t cap = std::max(rows, 2 * kv_cap_);
  const int64_t kvw = cfg_.num_key_value_heads * cfg_.head_dim();
  std::vector<DevMem> k, v;
  for (int64_t a = 0; a < sched_.num_attention(); ++a) {
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
  const bool A = sched_.num_attention() > 0, M = sched_.num_ssm() > 0, X = sched_.num_moe() > 0;
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
                        {&dt_, sched_.num_ssm() * cap * Di},
                        {&ret_, opts_.full ? sched_.num_ssm() * cap * Di : 0},
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
  const RunPlan plan = plan_run(*model_, opts);
  const bool layout_changes = opts.instruments != opts_.instruments || opts.full != opts_.full;
  opts_ = opts;
  n_reg_ = plan.registers;
  position_ = 0;
  kv_len_ = 0;
  norm_.assign(static_cast<size_t>(sched_.num_attention()), 0);
  for (int64_t i = 0; i < L; ++i) {
    const LayerWeights& lw = model_->w.layers[i];
    if (!sched_[i].has_attention()) continue;
    norm_[sched_[i].attn_index] = static_cast<int>(plan.normalizer[i]);
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
  read_device_records(rec_h_.as<float>(), S, rl_, *model_, opts_, sched_.num_attention(), n_reg_, recs);
}

void CudaBackend::forward(const int32_t* tokens, int64_t S, std::vector<TokenTrace>* out) {
  fail_guard();
  model_->check_files();  // the checkpoint still the one loaded (Model::files)
  forward_in_blocks(
      tokens, S, out, cfg_, opts_, sched_, n_reg_, position_, failed_,
      [&](int64_t total) { ensure_kv(kv_len_ + total); }, [&] { return block_limit(); },
      [&](int64_t n) { ensure_block(n); },
      [&](const int32_t* ids, int64_t n, TokenTrace* recs) {
        run_block(ids, n, true);
        read_records(n, recs);
        kv_len_ += n;
      });
}

}  // namespace hl::cuda

namespace hl {

namespace {

struct Probe {
  bool ok = false;
  std::string reason;
  std::string device;  // device 0: "NVIDIA H200, 139.8 GiB"
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
      cudaDeviceProp prop{};
      if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
        r.device =
            std::string(prop.name) + ", " + std::to_string(static_cast<int64_t>(prop.totalGlobalMem >> 20)) + " MiB";
      cudaGetLastError();
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

std::string cuda_describe_device() {
  return probe().ok ? probe().device : probe().reason;
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
