// The CUDA backend (cuda_backend.h): device weights in their stored dtype (bf16/fp16/fp32), the run's
// device state (what each layer module asks for, cuda_module.h: fp32 KV caches, Mamba windows and
// states; the rank-to-1 Welford state), the forward pass as launches of cuda_kernels.h
// (cuda_forward.cpp and the modules), and the one device→host copy per step into pinned memory.
// Decode (S = 1): matrix-vector kernels on the stored weights (one warp per row, 16-byte loads), the
// Mamba conv in in_proj's epilogue and norms + Δ + scan in one kernel, every RMSNorm (and the MoE
// router) run by the last block of the product that finishes h, MoE experts chosen on the device,
// programmatic dependent launches on sm_90; the whole step (parameters in, kernels, record out)
// captured once as a CUDA graph and relaunched per token (plain launches when capture fails or
// HL_CUDA_GRAPHS=0; HL_CUDA_FUSE=0 / HL_CUDA_PDL=0 turn the fusions / PDL off). Prefill (S > 1):
// cuBLAS GemmEx in fp32 (16-bit weights widened in panels first, so results match the CPU's fp32
// products), the chunked parallel scan, and one host read of the routing per MoE layer. Mirrors cpu_backend.cpp's
// contract; a BackendFailure (no device, out of memory, a sticky device error) poisons the backend
// and leaves the caller's records as they were, so the caller can rebuild the run on the CPU. With
// an observer (set_cuda_observer) the named intermediates are copied back too, decode by plain launches.
#include <stdexcept>

#include "engine/backend/cuda/cuda_backend_impl.h"
#include "engine/backend/run_plan.h"

namespace hl::cuda {

CudaBackend::CudaBackend(std::shared_ptr<const Model> model, const CudaOptions& opts, StageLink* link,
                         std::vector<LayerRange> ranges)
    : model_(std::move(model)),
      cfg_(model_->config),
      copts_(opts),
      sched_(model_->schedule),
      link_(link),
      ranges_(std::move(ranges)) {
  if (const char* g = std::getenv("HL_CUDA_GRAPHS"); g && std::strcmp(g, "0") == 0) copts_.graphs = false;
  const int64_t L = cfg_.num_hidden_layers;
  mine_ = stage_layers(*model_, link_, &ranges_);
  // The units of every layer of the stage (they refuse shapes their kernels do not take before any
  // device work).
  CudaUnits units = make_cuda_units(CudaModuleContext{*model_, cfg_, sched_}, mine_);
  mixers_ = std::move(units.mixers);
  ffns_ = std::move(units.ffns);
  for (int64_t i = 0; i < L; ++i) {
    if (mixers_[i]) units_.push_back(mixers_[i].get());
    if (ffns_[i]) units_.push_back(ffns_[i].get());
  }
  if (!cuda_available()) throw BackendFailure("cuda: " + cuda_unavailable_reason());
  int devices = 1;
  check(cudaGetDeviceCount(&devices), "counting the devices");
  const int dev = copts_.device_slot < 0 ? 0 : copts_.device_slot % std::max(devices, 1);
  check(cudaSetDevice(dev), "selecting device " + std::to_string(dev));
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, dev), "reading the device properties");
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
    // The units' state: the recurrent buffers now, the context caches when the first run reserves them.
    for (CudaUnit* u : units_) {
      needs_.push_back(u->state());
      state_.emplace_back();
      for (const CudaStateNeed& n : needs_.back())
        state_.back().push_back(n.per_position > 0 ? DevMem() : DevMem(static_cast<size_t>(n.bytes), n.what));
    }
    bind_state();
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

static_assert(kDeviceWeightTypes[cudam::kF32] == DType::F32 && kDeviceWeightTypes[cudam::kBF16] == DType::BF16 &&
              kDeviceWeightTypes[cudam::kQ8_0] == DType::Q8_0 && kDeviceWeightTypes[cudam::kQ4_K] == DType::Q4_K &&
              kDeviceWeightTypes[cudam::kQ6_K] == DType::Q6_K);

DW CudaWeights::upload(const Mat& m) {
  DW d;
  const int code = device_weight_code(m.dtype);  // -1: a type no kernel reads, widened exactly to F32
  d.dtype = code < 0 ? cudam::kF32 : code;
  d.rows = m.rows;
  d.cols = m.cols;
  if (m.empty()) return d;
  auto it = uploaded_.find({m.data, m.bytes()});
  if (it != uploaded_.end()) {
    d.p = it->second;
    return d;
  }
  std::vector<float> wide;
  std::vector<uint8_t> plain;  // a rows16 matrix in ggml's layout, as the kernels read it
  const uint8_t* bytes_in = plain_rows(m, 0, m.rows, plain);
  if (code < 0) {
    wide.resize(static_cast<size_t>(m.rows * m.cols));
    to_float(m.dtype, bytes_in, wide.data(), wide.size());
  }
  const void* src = wide.empty() ? static_cast<const void*>(bytes_in) : wide.data();
  const size_t bytes = wide.empty() ? static_cast<size_t>(m.bytes()) : wide.size() * 4;
  DevMem mem(bytes, "the weights (" + m.name + ")");
  check(cudaMemcpy(mem.as<void>(), src, bytes, cudaMemcpyHostToDevice), "uploading " + m.name);
  d.p = mem.as<void>();
  uploaded_[{m.data, m.bytes()}] = d.p;
  mem_.push_back(std::move(mem));
  widest_ = std::max(widest_, d.dtype == cudam::kF32 ? 0 : m.rows * m.cols);
  return d;
}

const float* CudaWeights::upload_vec(const std::vector<float>& v, const char* what) {
  return static_cast<const float*>(upload_bytes(v.data(), v.size() * 4, what));
}

const void* CudaWeights::upload_bytes(const void* data, size_t bytes, const std::string& what) {
  if (bytes == 0) return nullptr;
  DevMem mem(bytes, what);
  check(cudaMemcpy(mem.as<void>(), data, bytes, cudaMemcpyHostToDevice), "uploading " + what);
  const void* p = mem.as<void>();
  mem_.push_back(std::move(mem));
  return p;
}

void CudaBackend::upload_weights() {
  const ModelWeights& w = model_->w;
  const int64_t H = cfg_.hidden_size;
  embed_ = weights_.upload(w.embed);
  lm_head_ = weights_.upload(w.lm_head);
  final_norm_ = weights_.upload_vec(w.final_norm, "the final norm");
  trained_ = static_cast<int64_t>(w.register_rows.size()) / H;
  std::vector<float> regs(w.register_rows);
  regs.insert(regs.end(), w.mean_embedding.begin(), w.mean_embedding.end());
  regs_ = weights_.upload_vec(regs, "the register rows");
  layers_.resize(static_cast<size_t>(cfg_.num_hidden_layers));
  for (int64_t i = 0; i < cfg_.num_hidden_layers; ++i) {
    const LayerWeights& lw = w.layers[i];
    layers_[i].in_norm = weights_.upload_vec(lw.input_norm, "a norm");
    layers_[i].ff_norm = weights_.upload_vec(lw.pre_ff_norm, "a norm");
    if (mixers_[i]) mixers_[i]->upload(weights_);
    if (ffns_[i]) ffns_[i]->upload(weights_);
  }
  wide_cap_ = std::min<int64_t>(weights_.widest(), int64_t{32} << 20);  // ≤ 128 MiB of widened panel
}

void CudaBackend::plan_records() {
  rl_ = plan_device_record<int64_t>(cfg_, sched_, opts_, kv_cap_, false, 4);
}

int64_t CudaBackend::block_limit() const {
  int64_t lim = std::max<int64_t>(1, copts_.max_block);
  // The units' scratch (the attention kernel's: S·nh rows of 2·kv_cap floats) and the records stay
  // under 1 GiB each.
  for (const CudaUnit* u : units_) lim = std::min(lim, u->max_block(run_));
  lim = std::min(lim, std::max<int64_t>(1, (int64_t{1} << 30) / (rl_.stride * 4)));
  return lim;
}

void CudaBackend::bind_state() {
  for (size_t u = 0; u < units_.size(); ++u) {
    std::vector<float*> bufs;
    for (const DevMem& m : state_[u]) bufs.push_back(m.as<float>());
    units_[u]->bind_state(bufs);
  }
}

// The units' context caches (CudaStateNeed::per_position: the KV caches) for `rows` positions, the
// positions cached so far copied over; the old ones stay until every copy is done.
void CudaBackend::ensure_kv(int64_t rows) {
  if (rows <= kv_cap_) return;
  const int64_t cap = std::max(rows, 2 * kv_cap_);
  std::vector<std::vector<DevMem>> grown(units_.size());
  for (size_t u = 0; u < units_.size(); ++u) {
    const std::vector<CudaStateNeed>& needs = needs_[u];
    for (const CudaStateNeed& n : needs)
      grown[u].push_back(n.per_position > 0 ? DevMem(static_cast<size_t>(cap * n.per_position), n.what) : DevMem());
    if (kv_len_ > 0)
      for (size_t j = 0; j < needs.size(); ++j)
        if (needs[j].per_position > 0)
          check(cudaMemcpyAsync(grown[u][j].as<void>(), state_[u][j].as<void>(),
                                static_cast<size_t>(kv_len_ * needs[j].per_position), cudaMemcpyDeviceToDevice, st_),
                "growing the KV cache");
  }
  sync("growing the KV cache");
  for (size_t u = 0; u < units_.size(); ++u)
    for (size_t j = 0; j < needs_[u].size(); ++j)
      if (needs_[u][j].per_position > 0) state_[u][j] = std::move(grown[u][j]);
  bind_state();
  kv_cap_ = cap;
  plan_records();  // the attention rows of full traces are as wide as the cache
  cap_ = 0;        // the attention scratch is as wide as the cache: reallocate the block buffers
  ++gen_;
}

float* CudaScratch::device(const std::string& key) const {
  auto it = device_.find(key);
  if (it == device_.end()) throw std::logic_error("cuda: no block buffer '" + key + "' was asked for");
  return it->second;
}

void* CudaScratch::pinned(const std::string& key) const {
  auto it = pinned_.find(key);
  if (it == pinned_.end()) throw std::logic_error("cuda: no pinned buffer '" + key + "' was asked for");
  return it->second;
}

void CudaBackend::ensure_block(int64_t S) {
  if (S <= cap_ && rl_.stride == rec_alloc_stride_) return;
  int64_t cap = 1;
  while (cap < std::max(S, cap_)) cap *= 2;
  cap = std::max(S, std::min(cap, block_limit()));
  const int64_t H = cfg_.hidden_size, Di = cfg_.mamba_inner(), L = cfg_.num_hidden_layers, M = sched_.num_ssm();
  // The backend's block buffers, the units' scratch (one buffer per key, the largest asked for), then
  // the records' SSM rows and residual rows.
  std::vector<CudaScratchNeed> parts = {{"h", cap * H}, {"x", cap * H}, {"y", cap * H}};
  for (const CudaUnit* u : units_)
    for (const CudaScratchNeed& n : u->scratch(cap, run_)) {
      auto same = std::find_if(parts.begin(), parts.end(),
                               [&](const CudaScratchNeed& p) { return p.key == n.key && p.pinned == n.pinned; });
      if (same == parts.end())
        parts.push_back(n);
      else
        same->words = std::max(same->words, n.words);
    }
  parts.push_back({"ssm.delta", M * cap * Di});
  parts.push_back({"ssm.retained", opts_.full ? M * cap * Di : 0});
  parts.push_back({"rows", opts_.instruments ? (L + 1) * cap * H : 0});
  parts.push_back({"the stage's input rows", first_stage() ? 0 : cap * H, true});
  parts.push_back({"the stage's output rows", last_stage() ? 0 : cap * H, true});
  int64_t total = 0;
  for (const CudaScratchNeed& p : parts)
    if (!p.pinned) total += (p.words + 63) / 64 * 64;  // 256-byte aligned parts
  // Free first, then allocate the larger buffers.
  act_.reset();
  rec_d_.reset();
  cap_ = 0;
  drop_graph();
  act_ = DevMem(static_cast<size_t>(total * 4), "the activations (" + std::to_string(cap) + " tokens)");
  scratch_ = CudaScratch();
  float* base = act_.as<float>();
  for (const CudaScratchNeed& p : parts) {
    if (p.pinned) continue;
    scratch_.device_[p.key] = p.words ? base : nullptr;
    base += (p.words + 63) / 64 * 64;
  }
  h_ = scratch_.device("h");
  x_ = scratch_.device("x");
  y_ = scratch_.device("y");
  dt_ = scratch_.device("ssm.delta");
  ret_ = scratch_.device("ssm.retained");
  rows_ = scratch_.device("rows");
  rec_d_ = DevMem(static_cast<size_t>(cap * rl_.stride * 4), "the per-token records");
  rec_h_ = Pinned(static_cast<size_t>(cap * rl_.stride * 4), "the records' readback");
  if (!params_d_.bytes() || params_d_.bytes() < static_cast<size_t>((2 + cap) * 4)) {
    params_d_ = DevMem(static_cast<size_t>((2 + std::max<int64_t>(cap, 1024)) * 4), "the step parameters");
    params_h_ = Pinned(static_cast<size_t>((2 + std::max<int64_t>(cap, 1024)) * 4), "the step parameters");
  }
  for (const CudaScratchNeed& p : parts) {
    if (!p.pinned) continue;
    pinned_[p.key] = Pinned(static_cast<size_t>(p.words * 4), p.key.c_str());
    scratch_.pinned_[p.key] = pinned_[p.key].as<void>();
  }
  if (cap > 1 && wide_cap_ > 0 && !wide_.bytes())
    wide_ = DevMem(static_cast<size_t>(wide_cap_ * 4), "the widened weight panels");
  stage_in_ = first_stage() ? nullptr : static_cast<float*>(scratch_.pinned("the stage's input rows"));
  stage_out_ = last_stage() ? nullptr : static_cast<float*>(scratch_.pinned("the stage's output rows"));
  cap_ = cap;
  rec_alloc_stride_ = rl_.stride;
  for (CudaUnit* u : units_) u->bind_scratch(scratch_, run_);
  ++gen_;
}

void CudaBackend::sync(const char* what) {
  check(cudaStreamSynchronize(st_), what);
  check(cudaGetLastError(), what);
}

void CudaBackend::start(const RunOptions& opts) {
  fail_guard();
  const RunPlan plan = plan_run(*model_, opts);
  const bool layout_changes = opts.instruments != opts_.instruments || opts.full != opts_.full;
  opts_ = opts;
  n_reg_ = plan.registers;
  position_ = 0;
  kv_len_ = 0;
  std::vector<int> baked;  // the units' run options (the attention layers' normalizers), in layer order
  for (CudaUnit* u : units_) u->start(plan, baked);
  baked.push_back(opts_.instruments);
  baked.push_back(opts_.full);
  if (baked != baked_) ++gen_;  // the options are baked into the captured step
  baked_ = baked;
  try {
    if (layout_changes) cap_ = 0;  // the block buffers depend on instruments/full
    ensure_kv(n_reg_ + 256);
    plan_records();
    ensure_block(1);
    for (size_t u = 0; u < units_.size(); ++u)  // the units' recurrent state (CudaStateNeed::bytes)
      for (size_t j = 0; j < needs_[u].size(); ++j)
        if (needs_[u][j].per_position == 0)
          check(cudaMemsetAsync(state_[u][j].as<void>(), 0, state_[u][j].bytes(), st_), "clearing " + needs_[u][j].what);
    check(cudaMemsetAsync(rank1_.as<void>(), 0, rank1_.bytes(), st_), "clearing the rank-to-1 state");
    // Registers: trained rows first, then the mean embedding row (row `trained` of regs_); a later
    // stage receives their rows from the stage before.
    const int64_t H = cfg_.hidden_size;
    stage_rows_in(link_, rows_host_, n_reg_, H);
    int64_t fed = 0;
    feed_registers(
        n_reg_, trained_, [&] { return block_limit(); }, [&](int64_t n) { ensure_block(n); },
        [&](const int32_t* ids, int64_t n) {
          run_block(ids, n, false, fed);
          kv_len_ += n;
          fed += n;
        });
    stage_rows_out(link_, rows_host_);
    sync("clearing the state");
    capture_decode();
  } catch (const BackendFailure& e) {
    failed_ = e.what();
    throw;
  }
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
    struct Capturing {  // no observation copies in the graph (a capture runs nothing)
      bool& on;
      explicit Capturing(bool& b) : on(b) { on = true; }
      ~Capturing() { on = false; }
    } capturing(capturing_);
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

void CudaBackend::run_block(const int32_t* ids, int64_t S, bool records, int64_t row0) {
  if (g_fail_after.load() >= 0 && g_fail_after.fetch_sub(1) == 0)
    throw BackendFailure("cuda: an unrecoverable device error (simulated; HL_CUDA_FAIL_AFTER)");
  int32_t* p = params_h_.as<int32_t>();  // (2 + S,): cached positions, S, ids
  p[0] = static_cast<int32_t>(kv_len_);
  p[1] = static_cast<int32_t>(S);
  std::memcpy(p + 2, ids, static_cast<size_t>(S) * 4);
  const size_t H = static_cast<size_t>(cfg_.hidden_size), n = static_cast<size_t>(S) * H;
  float* rows = link_ ? rows_host_.data() + static_cast<size_t>(row0) * H : nullptr;  // a stage's rows of this block
  if (stage_in_) std::memcpy(stage_in_, rows, n * 4);
  const int64_t before = launches_;
  bool graphed = false;
  if (S == 1 && records && copts_.graphs && !observer_) {  // observed: plain launches, copies between them
    capture_decode();
    if (graph_exec_) {
      check(cudaGraphLaunch(graph_exec_, st_), "launching the decode graph");
      graphed = true;
    }
  }
  if (!graphed) enqueue(S, records);
  if (S == 1 && records) {
    decode_graph_ = graphed;
    if (!graphed) kernels_per_token_ = launches_ - before;
  }
  sync(records ? "running the model" : "feeding the registers");
  if (stage_out_) std::memcpy(rows, stage_out_, n * 4);
}

void CudaBackend::read_records(int64_t S, TokenTrace* recs) const {
  read_device_records(rec_h_.as<float>(), S, rl_, *model_, opts_, n_reg_, recs);
}

void CudaBackend::forward(const int32_t* tokens, int64_t S, std::vector<TokenTrace>* out) {
  fail_guard();
  model_->check_files();  // the checkpoint still the one loaded (Model::files)
  if (S <= 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  const size_t first = out->size();
  const int64_t H = cfg_.hidden_size;
  forward_in_blocks(
      tokens, S, out, cfg_, opts_, sched_, n_reg_, position_, failed_,
      [&](int64_t total) {
        ensure_kv(kv_len_ + total);
        stage_rows_in(link_, rows_host_, total, H);  // after the checks every stage makes
      },
      [&] { return block_limit(); }, [&](int64_t n) { ensure_block(n); },
      [&](const int32_t* ids, int64_t n, TokenTrace* recs) {
        run_block(ids, n, true, ids - tokens);
        read_records(n, recs);
        kv_len_ += n;
      });
  finish_device_stage(link_, rows_host_, ranges_, sched_, out, first, S, t0);
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

std::unique_ptr<Backend> make_cuda_stage_backend(std::shared_ptr<const Model> model, const CudaOptions& opts,
                                                 StageLink* link, std::vector<LayerRange> ranges) {
  if (!cuda_available()) throw BackendFailure("cuda: " + cuda_unavailable_reason());
  return std::make_unique<cuda::CudaBackend>(std::move(model), opts, link, std::move(ranges));
}

void set_cuda_observer(Backend& b, IntermediateObserver f) {
  auto* c = dynamic_cast<cuda::CudaBackend*>(&b);
  if (!c) throw std::invalid_argument("set_cuda_observer: backend '" + b.name() + "' is not the CUDA backend");
  c->set_observer(std::move(f));
}

bool cuda_reports_intermediate(const char* name, int64_t rows) {
  if (rows > 1) return true;
  for (const char* n : kAccumulatedIntermediates)
    if (std::strcmp(name, n) == 0) return false;
  return true;
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
