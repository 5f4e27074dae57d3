// DoRA magnitude / direction changes per adapted matrix (Liu et al. 2024; trace-format.md §4
// `hybridlens dora`): for W0 and W' of shape (out, in), per output row j (norm over the input dim),
// ΔM = mean_j | ‖W'_j‖ − ‖W0_j‖ |, ΔD = mean_j (1 − cos(W'_j, W0_j)); the least-squares slope of
// ΔM on ΔD; the CSV `layer,module,delta_m,delta_d`. Not the adapter reader: io/adapter.h.
#pragma once
#include <string>
#include <vector>

#include "engine/io/adapter.h"
#include "engine/model/weights.h"

namespace hl {

struct DoraRow {
  int layer = 0;       // decoder layer; -1 for lm_head (adapters only)
  std::string module;  // "self_attn.q_proj", "mamba.in_proj", "feed_forward.experts.3.up_proj", "lm_head"
  double delta_m = 0;  // mean_j | ‖W'_j‖ − ‖W0_j‖ |
  double delta_d = 0;  // mean_j (1 − cos(W'_j, W0_j)), in [0, 2]
};

// Per-row accumulation of one matrix pair. cos is taken as 0 when either row is all zero (the
// convention of torch.nn.functional.cosine_similarity, which clamps the norm product at eps).
class DoraAccumulator {
 public:
  // w0, w1: (in,) rows of W0 and W'.
  void add_row(const double* w0, const double* w1, int64_t in);
  double delta_m() const { return rows_ ? sum_m_ / static_cast<double>(rows_) : 0.0; }
  double delta_d() const { return rows_ ? sum_d_ / static_cast<double>(rows_) : 0.0; }
  int64_t rows() const { return rows_; }
  void merge(const DoraAccumulator& o);

 private:
  double sum_m_ = 0, sum_d_ = 0;
  int64_t rows_ = 0;
};

// ΔM, ΔD of W' against W0 for two stored matrices of equal shape (rows in any float dtype).
void dora_deltas(const Mat& w0, const Mat& w1, double* delta_m, double* delta_d);

// One row per module of the adapter (PEFT DoRA or plain LoRA W', jamba-spec.md §5.4) against the
// unmerged base, in the base model's module order. Checks the adapter against the base first
// (check_adapter; throws LoadError).
std::vector<DoraRow> dora_rows_adapter(const Model& base, const Adapter& a);

// One row per 2-D linear weight inside the decoder layers present in both models with equal shapes
// (linear_modules without lm_head: the router included, fused experts per expert; embeddings and the
// LM head excluded). A_log and conv1d are SSM parameters, not linear maps, and are not compared.
std::vector<DoraRow> dora_rows_tuned(const Model& base, const Model& tuned);

// Least-squares slope b of ΔM = a + b·ΔD over the rows (Liu et al. 2024 fit):
// b = Σ(ΔD − mean ΔD)(ΔM − mean ΔM) / Σ(ΔD − mean ΔD)². NaN when there are fewer than two rows or
// every ΔD is the same (zero variance: the slope is undefined).
double least_squares_slope(const std::vector<DoraRow>& rows);

// Per layer: matrices, mean ΔM and mean ΔD (for the command's summary and the view's per-layer plot).
struct DoraLayerSummary {
  int layer = 0;
  int matrices = 0;
  double mean_delta_m = 0, mean_delta_d = 0;
};
std::vector<DoraLayerSummary> dora_layer_summary(const std::vector<DoraRow>& rows);

// CSV text: header `layer,module,delta_m,delta_d`, one line per row, values as %.9g.
std::string dora_csv(const std::vector<DoraRow>& rows);
// Writes dora_csv atomically (write_file_atomic). Throws Error.
void write_dora_csv(const std::string& path, const std::vector<DoraRow>& rows);
// Parses dora_csv text (untrusted: `source` names it in messages; at most kMaxCsvBytes). Throws LoadError.
constexpr size_t kMaxDoraCsvBytes = 64u << 20;
std::vector<DoraRow> parse_dora_csv(const std::string& text, const std::string& source);

}  // namespace hl
