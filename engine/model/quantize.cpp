// Quantise on load (quantize.h): the rule that picks the matrices, the plan, and the conversion of each
// row through ggml's reference quantiser with the error measured against the stored values.
#include "engine/model/quantize.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <functional>
#include <cmath>
#include <cstring>
#include <memory>

#include "engine/core/anon_buffer.h"
#include "engine/core/error.h"
#include "engine/core/ggml_quant.h"
#include "engine/core/rows16.h"
#include "engine/core/thread_pool.h"
#include "engine/model/matrix_roles.h"

namespace hl {
namespace {

constexpr DType kFormats[] = {DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::Q4_0, DType::Q5_0, DType::Q5_1, DType::Q5_K};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Why matrix `m` of role `role` stays as stored for `format`, or "" to quantise it. With `head` the LM
// head is quantised, and so is the embedding when the head is tied to it (one matrix).
std::string keep_reason(const char* role, const Mat& m, DType format, bool head, bool tied) {
  const std::string r = role;
  if (r == "embedding" && !(head && tied)) return "embedding (kept by the rule)";
  if (r == "lm_head" && !head) return "LM head (kept by the rule; +head quantises it)";
  if (r == "router") return "router (kept by the rule)";
  if (r == "mamba.x_proj" || r == "mamba.dt_proj") return "Mamba-1 " + r.substr(6) + " (kept by the rule)";
  if (dtype_is_block(m.dtype)) return std::string("already ") + dtype_name(m.dtype);
  if (m.cols % dtype_block(format) != 0)
    return std::to_string(m.cols) + " columns are not a multiple of the " + std::to_string(dtype_block(format)) +
           "-value block";
  return "";
}

// A matrix whose rows are at `bytes` (its own, writable) rearranged in place into the CPU's 16-row
// groups (core/rows16.h), where rows16_preferred(its format) and its rows come in whole groups.
void to_rows16(Mat& x, uint8_t* bytes) {
  if (!rows16_preferred(x.dtype) || x.rows16 || x.rows % kGroupRows != 0) return;
  const int64_t group = kGroupRows * x.row_bytes();
  ThreadPool::global().parallel_for(x.rows / kGroupRows, 1, [&](int64_t g0, int64_t g1) {
    thread_local std::vector<uint8_t> rows;
    rows.resize(static_cast<size_t>(group));
    for (int64_t g = g0; g < g1; ++g) {
      std::memcpy(rows.data(), bytes + g * group, rows.size());
      rows16_pack(x.dtype, rows.data(), x.cols / dtype_block(x.dtype), bytes + g * group);
    }
  });
  x.rows16 = true;
}

}  // namespace

void interleave_rows16(Model& m) {
  const bool tied = m.w.lm_head.data == m.w.embed.data;
  std::vector<const void*> done;  // a matrix's bytes are rearranged once, whichever views share them
  each_matrix_role(m, [&](const char* role, Mat& x) {
    const std::string r = role;
    if (r == "mamba.x_proj" || r == "mamba.dt_proj" || r == "router") return;  // read by rows (probes), and small
    if (std::find(done.begin(), done.end(), x.data) != done.end()) {  // e.g. a head tied to the embedding
      x.rows16 = true;
      return;
    }
    // The bytes are the model's own copy (a GGUF file's weights are copied into memory on load).
    to_rows16(x, static_cast<uint8_t*>(const_cast<void*>(x.data)));
    if (x.rows16) done.push_back(x.data);
  });
  if (tied) m.w.lm_head.rows16 = m.w.embed.rows16;
}

int64_t WeightQuantization::quantized_count() const {
  int64_t n = 0;
  for (const MatQuant& q : mats) n += q.kept.empty() ? 1 : 0;
  return n;
}

double WeightQuantization::worst_rel_rms() const {
  double w = 0;
  for (const MatQuant& q : mats) w = std::max(w, q.rel_rms);
  return w;
}

std::string weight_format_name(DType format, bool head) {
  return lower(dtype_name(format)) + (head ? "+head" : "");
}

std::string weights_label(const Model& m) {
  const std::string f = m.quantization ? weight_format_name(m.quantization->format, m.quantization->head)
                                       : std::string(m.fp32_activations ? "as-stored" : "");
  return m.fp32_activations ? f + kFp32ActivationsSuffix : f;
}

void keep_fp32_activations(Model& m) {
  m.fp32_activations = true;
  each_matrix_role(m, [](const char*, Mat& x) { x.fp32_activations = true; });
  m.w.lm_head.fp32_activations = true;  // also when tied (a copy of the embedding's view)
}

std::string weight_format_choices() {
  std::string s = "as-stored";
  for (DType t : kFormats) s += ", " + lower(dtype_name(t));
  return s;
}

std::optional<DType> parse_weight_format(const std::string& given, const std::string& what, bool* head,
                                         bool* fp32_activations) {
  std::string name = given;
  const std::string fp32x = kFp32ActivationsSuffix;
  if (fp32_activations) *fp32_activations = false;
  if (fp32_activations && name.size() > fp32x.size() && lower(name).ends_with(fp32x)) {
    *fp32_activations = true;
    name.resize(name.size() - fp32x.size());
  }
  const std::string low = lower(name), suffix = "+head";
  if (low == "as-stored") return std::nullopt;
  const bool with_head = low.size() > suffix.size() && low.ends_with(suffix);
  const std::optional<DType> t = dtype_from_weight_name(with_head ? name.substr(0, name.size() - suffix.size()) : name);
  for (DType f : kFormats)
    if (t && *t == f) {
      if (head) *head = with_head;
      return f;
    }
  throw Error(what + ": '" + given + "' is not a weight format (allowed " + weight_format_choices() +
              ", each optionally with +head" + (fp32_activations ? std::string(", then +fp32-activations") : "") + ")");
}

WeightQuantization plan_quantization(Model& m, DType format, bool head) {
  WeightQuantization q;
  q.format = format;
  q.head = head;
  const bool tied = m.w.lm_head.data == m.w.embed.data;
  each_matrix_role(m, [&](const char* role, Mat& x) {
    MatQuant mq;
    mq.name = x.name;
    mq.rows = x.rows;
    mq.cols = x.cols;
    mq.from = x.dtype;
    mq.kept = keep_reason(role, x, format, head, tied);
    mq.to = mq.kept.empty() ? format : x.dtype;
    mq.bytes_before = x.bytes();
    mq.bytes_after = mq.rows * dtype_row_bytes(mq.to, mq.cols);
    q.bytes_before += mq.bytes_before;
    q.bytes_after += mq.bytes_after;
    q.mats.push_back(std::move(mq));
  });
  return q;
}

void quantize_model(Model& m, DType format, bool own_kept, const QuantizeHooks& hooks, bool head) {
  const auto t0 = std::chrono::steady_clock::now();
  const bool tied = m.w.lm_head.data == m.w.embed.data;
  auto q = std::make_shared<WeightQuantization>(plan_quantization(m, format, head));
  std::vector<Mat*> mats;
  each_matrix_role(m, [&](const char*, Mat& x) { mats.push_back(&x); });
  // One buffer for every matrix written here, each at a 64-byte-aligned offset: one mapping in huge
  // pages (anon_buffer.h) instead of a heap block per matrix, most of them smaller than a huge page.
  // Reserved, not resident: each matrix's pages are committed as it is written and its source released.
  const auto written = [&](size_t k) { return q->mats[k].kept.empty() || own_kept; };
  std::vector<uint64_t> at(mats.size(), 0);
  uint64_t total = 0;
  for (size_t k = 0; k < mats.size(); ++k) {
    if (!written(k)) continue;
    at[k] = total;
    total += (static_cast<uint64_t>(q->mats[k].bytes_after) + 63) / 64 * 64;
  }
  auto arena = std::make_shared<AnonBuffer>(total, "the weights quantised to " + std::string(dtype_name(format)));
  m.keep_alive.push_back(arena);
  ThreadPool& pool = ThreadPool::global();
  for (size_t k = 0; k < mats.size(); ++k) {
    Mat& x = *mats[k];
    MatQuant& mq = q->mats[k];
    if (hooks.progress &&
        !hooks.progress(static_cast<int64_t>(k), static_cast<int64_t>(mats.size()),
                        "quantising " + x.name + " to " + dtype_name(format)))
      throw Cancelled();
    if (!written(k)) continue;
    const void* source = x.data;
    uint8_t* const buf = arena->data() + at[k];
    if (!mq.kept.empty()) {
      std::memcpy(buf, x.data, static_cast<size_t>(mq.bytes_after));
    } else {
      // Rows on the pool; each thread sums its own squared error and norm in double.
      const int threads = pool.size();
      std::vector<double> err(static_cast<size_t>(threads), 0.0), norm(static_cast<size_t>(threads), 0.0);
      std::vector<int64_t> bad(static_cast<size_t>(threads), -1);
      const int64_t out_row = dtype_row_bytes(format, x.cols);
      pool.parallel_for(x.rows, std::max<int64_t>(1, 65536 / std::max<int64_t>(1, x.cols)), [&](int64_t r0, int64_t r1) {
        const size_t ti = static_cast<size_t>(ThreadPool::thread_index());
        thread_local std::vector<float> w, back;
        w.resize(static_cast<size_t>(x.cols));
        back.resize(static_cast<size_t>(x.cols));
        for (int64_t r = r0; r < r1; ++r) {
          to_float(x.dtype, x.row_ptr(r), w.data(), w.size());
          for (int64_t c = 0; c < x.cols; ++c)
            if (!std::isfinite(w[static_cast<size_t>(c)])) {
              if (bad[ti] < 0 || r * x.cols + c < bad[ti]) bad[ti] = r * x.cols + c;
              break;
            }
          if (bad[ti] >= 0) continue;
          uint8_t* dst = buf + r * out_row;
          from_float(format, w.data(), dst, w.size());
          to_float(format, dst, back.data(), back.size());
          double e = 0, n = 0;
          for (int64_t c = 0; c < x.cols; ++c) {
            const double a = w[static_cast<size_t>(c)], d = a - back[static_cast<size_t>(c)];
            e += d * d;
            n += a * a;
          }
          err[ti] += e;
          norm[ti] += n;
        }
      });
      int64_t first_bad = -1;
      double e = 0, n = 0;
      for (size_t t = 0; t < err.size(); ++t) {
        e += err[t];
        n += norm[t];
        if (bad[t] >= 0 && (first_bad < 0 || bad[t] < first_bad)) first_bad = bad[t];
      }
      if (first_bad >= 0)
        throw LoadError(x.name + ": element [" + std::to_string(first_bad / x.cols) + ", " + std::to_string(first_bad % x.cols) +
                        "] is not finite (allowed finite weights for --weights " + weight_format_name(format, head) +
                        ")");
      mq.rel_rms = n > 0 ? std::sqrt(e / n) : 0.0;
      x.dtype = format;
      to_rows16(x, buf);
    }
    x.data = buf;
    if (hooks.release) hooks.release(source, static_cast<size_t>(mq.bytes_before));
  }
  if (tied) m.w.lm_head = m.w.embed;  // the same rows, wherever the embedding now lives
  q->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  m.quantization = q;
}

}  // namespace hl
