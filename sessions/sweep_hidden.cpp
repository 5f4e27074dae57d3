// The hidden-attention rows of a run reduced to sweep statistics (see sweep_hidden.h).
#include "sessions/sweep_hidden.h"

#include <cmath>
#include <vector>

#include "engine/core/error.h"
#include "engine/probes/hidden_attention.h"

namespace hl {

void add_hidden_attention(SweepStats& stats, std::shared_ptr<const Model> model, const RunOptions& opts,
                          const Run& run) {
  const int64_t mh = sweep_ssm_heads(model->schedule), Mn = model->schedule.num_ssm();
  if (Mn == 0 || mh == 0 || run.records.empty()) return;
  std::vector<int32_t> ids;
  ids.reserve(run.records.size());
  for (const TokenTrace& r : run.records) ids.push_back(r.token_id);
  HiddenAttentionTracker tracker(std::move(model), opts);
  tracker.follow(ids.data(), static_cast<int64_t>(ids.size()));
  const int64_t nReg = tracker.registers(), T = static_cast<int64_t>(ids.size());
  std::vector<float> row(static_cast<size_t>(nReg + T));
  for (int64_t m = 0; m < Mn; ++m) {
    const SsmRows& rows = tracker.layer(m);
    if (rows.rows() != nReg + T)
      throw Error("sweep --hidden-attention: SSM layer " + std::to_string(m) + " kept " +
                  std::to_string(rows.rows()) + " rows of " + std::to_string(nReg + T));
    // Mamba-2: one row per head; Mamba-1: the mean |M| over the channels (head −1), one "head".
    const int64_t heads = rows.mamba1 ? 1 : rows.nh;
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t r = nReg + t, n = r + 1;
        hidden_attention_head_or_mean_row(rows, rows.mamba1 ? -1 : h, r, row.data());
        const HiddenRowStats st = hidden_row_stats(row.data(), n);
        // The first token's key is column nReg (as attn_first_mass); an all-zero row is uniform.
        const double first =
            st.abs_sum > 0 ? std::fabs(static_cast<double>(row[static_cast<size_t>(nReg)])) / st.abs_sum
                           : 1.0 / static_cast<double>(n);
        stats.add_hidden_row(m, h, st.entropy, first);
      }
  }
}

}  // namespace hl
