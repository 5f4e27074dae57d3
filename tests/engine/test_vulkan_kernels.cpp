// The kernel cases of backend_kernel_cases.h on the Vulkan backend's GLSL kernels (rmsnorm.comp,
// attention.comp, conv.comp, scan_step.comp, moe_route.comp), each run alone through the backend's
// test hook (engine/backend/vulkan/vk_kernel_run.h) with its push constants laid out as vk_record.cpp
// lays them out. Built only into hl_vulkan_tests (HL_VULKAN_TESTS); skips where no Vulkan device
// exists (lavapipe counts). Tolerances: as stated in backend_kernel_cases.h.
#ifdef HL_VULKAN_TESTS
#include <cstring>

#include "engine/backend/vulkan/vk_kernel_run.h"
#include "tests/engine/backend_kernel_cases.h"
#include "tests/engine/vulkan_test_util.h"

using namespace hl;
using namespace hl::kerneltest;
using namespace hl::vk;

namespace {

uint32_t u32(int64_t v) {
  return static_cast<uint32_t>(v);
}

// Appends floats to a binding's words; returns the offset (in 32-bit words) where they start.
uint32_t put(std::vector<uint32_t>& buf, const float* v, int64_t n) {
  const uint32_t off = u32(static_cast<int64_t>(buf.size()));
  buf.resize(buf.size() + static_cast<size_t>(n));
  std::memcpy(&buf[off], v, static_cast<size_t>(n) * 4);
  return off;
}
uint32_t reserve(std::vector<uint32_t>& buf, int64_t n) {
  const uint32_t off = u32(static_cast<int64_t>(buf.size()));
  buf.resize(buf.size() + static_cast<size_t>(n), 0u);
  return off;
}
void get(const std::vector<uint32_t>& buf, uint32_t off, int64_t n, float* out) {
  std::memcpy(out, &buf[off], static_cast<size_t>(n) * 4);
}

class VulkanKernels : public KernelImpl {
 public:
  bool rmsnorm(const float* x, const float* w, int64_t S, int64_t n, double eps, float* y) override {
    KernelCall c;
    c.kernel = Kernel::RmsNorm;
    RmsNormPC pc{};
    pc.in_off = put(c.bind[kAct], x, S * n);
    pc.in_stride = u32(n);
    pc.out_off = reserve(c.bind[kAct], S * n);
    pc.out_stride = u32(n);
    pc.n = u32(n);
    pc.w_off = put(c.bind[kVec], w, n);
    pc.eps = static_cast<float>(eps);
    c.push = push_bytes(pc);
    c.gx = u32(S);
    run_kernel(c);
    get(c.bind[kAct], pc.out_off, S * n, y);
    return true;
  }
  // One query (registers none, keys 0..n−1 already appended): params[0] = n − 1 keys before it.
  bool attention(const float* q, const float* K, const float* V, int64_t n, int64_t nh, int64_t nkv, int64_t hd,
                 Normalizer norm, const float* null_logits, float* o, ref::AttnRow* rows, float* p) override {
    KernelCall c;
    c.kernel = Kernel::Attention;
    AttentionPC pc{};
    pc.nh = u32(nh);
    pc.nkv = u32(nkv);
    pc.hd = u32(hd);
    pc.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    pc.q_off = put(c.bind[kAct], q, nh * hd);
    pc.q_stride = u32(nh * hd);
    pc.o_off = reserve(c.bind[kAct], nh * hd);
    pc.has_null = norm != Normalizer::Softmax;
    const std::vector<float> zero(static_cast<size_t>(nh), 0.0f);
    pc.null_off = static_cast<int32_t>(put(c.bind[kVec], norm == Normalizer::Sink ? null_logits : zero.data(), nh));
    put(c.bind[kStateA], K, n * nkv * hd);
    put(c.bind[kStateB], V, n * nkv * hd);
    const int32_t before = static_cast<int32_t>(n - 1);
    c.bind[kParams].push_back(static_cast<uint32_t>(before));
    pc.rec_on = 1;
    pc.attn_off = 0;
    pc.attn_count = u32(nh);
    pc.slot0 = 0;
    pc.full = 1;
    pc.rows_off = u32(4 * nh);
    pc.rows_stride = u32(n + 1);
    pc.rec_stride = u32(4 * nh + nh * (n + 1));
    reserve(c.bind[kRec], pc.rec_stride);
    c.push = push_bytes(pc);
    c.gx = u32(nh);
    run_kernel(c);
    get(c.bind[kAct], pc.o_off, nh * hd, o);
    std::vector<float> rec(pc.rec_stride);
    get(c.bind[kRec], 0, pc.rec_stride, rec.data());
    for (int64_t h = 0; h < nh; ++h) {
      const float* row = &rec[pc.rows_off + h * (n + 1)];  // (n + 1,): the keys, then p_null
      std::copy(row, row + n, p + h * n);
      rows[h] = ref::AttnRow{rec[h], rec[nh + h], rec[2 * nh + h], row[n], rec[3 * nh + h]};
    }
    return true;
  }
  // The window lives per channel as (Di, W) in the state buffer, newest last.
  bool conv(float* window, const float* x, int64_t S, const float* conv_w, const float* bias, int64_t Di, int64_t W,
            float* u) override {
    KernelCall c;
    c.kernel = Kernel::Conv;
    ConvPC pc{};
    pc.Di = u32(Di);
    pc.W = u32(W);
    pc.S = u32(S);
    pc.xz_off = put(c.bind[kAct], x, S * Di);
    pc.xz_stride = u32(Di);
    pc.u_off = reserve(c.bind[kAct], S * Di);
    std::vector<float> win(static_cast<size_t>(Di * W));  // (Di, W)
    for (int64_t k = 0; k < W; ++k)
      for (int64_t d = 0; d < Di; ++d) win[d * W + k] = window[k * Di + d];
    pc.win_off = put(c.bind[kStateA], win.data(), Di * W);
    pc.cw_off = put(c.bind[kVec], conv_w, Di * W);
    pc.cb_off = bias ? static_cast<int32_t>(put(c.bind[kVec], bias, Di)) : -1;
    c.push = push_bytes(pc);
    c.gx = u32((Di + 63) / 64);
    run_kernel(c);
    get(c.bind[kAct], pc.u_off, S * Di, u);
    get(c.bind[kStateA], pc.win_off, Di * W, win.data());
    for (int64_t k = 0; k < W; ++k)
      for (int64_t d = 0; d < Di; ++d) window[k * Di + d] = win[d * W + k];
    return true;
  }
  // B and C already normalised (bn_off = cn_off = −1); Δ and the retained share through the records.
  bool scan(float* h, const float* dt, const float* u, const float* z, const float* B, const float* C, const float* A,
            const float* D, int64_t S, int64_t Di, int64_t N, float* out, float* delta, float* retained) override {
    KernelCall c;
    c.kernel = Kernel::ScanStep;
    ScanPC pc{};
    pc.Di = u32(Di);
    pc.N = u32(N);
    pc.S = u32(S);
    pc.dt_off = put(c.bind[kAct], dt, S * Di);
    pc.u_off = put(c.bind[kAct], u, S * Di);
    pc.z_off = put(c.bind[kAct], z, S * Di);
    pc.z_stride = u32(Di);
    pc.b_off = put(c.bind[kAct], B, S * N);
    pc.c_off = put(c.bind[kAct], C, S * N);
    pc.bc_stride = u32(N);
    pc.out_off = reserve(c.bind[kAct], S * Di);
    pc.a_off = put(c.bind[kVec], A, Di * N);
    pc.d_off = put(c.bind[kVec], D, Di);
    pc.h_off = put(c.bind[kStateA], h, Di * N);
    pc.full = 1;
    pc.rec_stride = u32(2 * Di);
    pc.delta_off = 0;
    pc.ret_off = u32(Di);
    reserve(c.bind[kRec], S * 2 * Di);
    pc.bn_off = pc.cn_off = -1;
    pc.eps = 1e-6f;
    c.push = push_bytes(pc);
    c.gx = u32((Di + 63) / 64);
    run_kernel(c);
    get(c.bind[kAct], pc.out_off, S * Di, out);
    get(c.bind[kStateA], pc.h_off, Di * N, h);
    for (int64_t s = 0; s < S; ++s) {
      get(c.bind[kRec], u32(s * 2 * Di), Di, delta + s * Di);
      get(c.bind[kRec], u32(s * 2 * Di + Di), Di, retained + s * Di);
    }
    return true;
  }
  bool router(const float* logits, int64_t S, int64_t E, int64_t k, float* probs, int32_t* topk, float* lse) override {
    KernelCall c;
    c.kernel = Kernel::MoeRoute;
    MoeRoutePC pc{};
    pc.E = u32(E);
    pc.K = u32(k);
    pc.S = u32(S);
    pc.lg_off = put(c.bind[kAct], logits, S * E);
    pc.rec_on = 1;
    pc.rec_stride = u32(E + k + 1);
    pc.probs_off = 0;
    pc.topk_off = u32(E);
    pc.lse_off = u32(E + k);
    reserve(c.bind[kRec], S * (E + k + 1));
    pc.prob_tmp = reserve(c.bind[kRoute], S * E);
    pc.sel_off = reserve(c.bind[kRoute], S * k);
    pc.selw_off = reserve(c.bind[kRoute], S * k);
    pc.lists = 0;
    c.push = push_bytes(pc);
    run_kernel(c);
    for (int64_t s = 0; s < S; ++s) {
      const uint32_t rb = u32(s * (E + k + 1));
      get(c.bind[kRec], rb, E, probs + s * E);
      std::memcpy(topk + s * k, &c.bind[kRec][rb + E], static_cast<size_t>(k) * 4);
      get(c.bind[kRec], rb + u32(E + k), 1, lse + s);
    }
    return true;
  }
};

std::vector<KernelBackend> vulkan_backends() {
  return {{"vulkan", []() -> std::unique_ptr<KernelImpl> {
             if (!vktest::have_vulkan()) return nullptr;
             return std::make_unique<VulkanKernels>();
           }}};
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Device, BackendKernels, ::testing::ValuesIn(vulkan_backends()), kernel_backend_name);

#endif  // HL_VULKAN_TESTS
