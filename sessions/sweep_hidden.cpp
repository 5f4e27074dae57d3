// The hidden-attention rows of a run reduced to sweep statistics (see sweep_hidden.h).
#include "sessions/sweep_hidden.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "engine/core/error.h"
#include "engine/probes/hidden_attention.h"

namespace hl {

namespace {

// Layer i's cells on the head axis of the hidden instruments: sweep_ssm_heads (Mamba-2 heads, or one
// channel mean for Mamba-1) where it has an SSM, none otherwise.
int64_t hidden_heads(const Model& m, int64_t i) {
  return m.schedule[i].has_ssm() ? sweep_ssm_heads(m.schedule) : 0;
}

// How many values (entropy, first-token share per head and token) layers [r.begin, r.end) give.
int64_t hidden_values(const Model& m, LayerRange r, int64_t T) {
  int64_t n = 0;
  for (int64_t i = r.begin; i < r.end; ++i) n += 2 * hidden_heads(m, i) * T;
  return n;
}

// Adds the values of layers [r.begin, r.end) in order: per SSM layer, head, token (entropy, first).
void add_values(SweepStats& stats, const Model& m, LayerRange r, int64_t T, const double* v) {
  for (int64_t i = r.begin; i < r.end; ++i)
    for (int64_t h = 0; h < hidden_heads(m, i); ++h)
      for (int64_t t = 0; t < T; ++t, v += 2) stats.add_hidden_row(m.schedule[i].ssm_index, h, v[0], v[1]);
}

}  // namespace

void add_hidden_attention(SweepStats& stats, std::shared_ptr<const Model> model, const RunOptions& opts,
                          const Run& run, StageLink* link, std::vector<LayerRange> ranges) {
  const int64_t mh = sweep_ssm_heads(model->schedule), Mn = model->schedule.num_ssm();
  if (Mn == 0 || mh == 0 || run.records.empty()) return;
  std::vector<int32_t> ids;
  ids.reserve(run.records.size());
  for (const TokenTrace& r : run.records) ids.push_back(r.token_id);
  const std::shared_ptr<const Model> m = model;
  HiddenAttentionTracker tracker(std::move(model), opts, link, ranges);
  if (!link) ranges = {LayerRange{0, m->schedule.size()}};
  const LayerRange mine = ranges[static_cast<size_t>(link ? link->rank() : 0)];
  tracker.follow(ids.data(), static_cast<int64_t>(ids.size()));
  const int64_t nReg = tracker.registers(), T = static_cast<int64_t>(ids.size());
  std::vector<float> row(static_cast<size_t>(nReg + T));
  std::vector<double> values;  // this stage's, in add_values' order
  values.reserve(static_cast<size_t>(hidden_values(*m, mine, T)));
  for (int64_t i = mine.begin; i < mine.end; ++i) {
    const int64_t sm = m->schedule[i].ssm_index;
    if (sm < 0) continue;
    const SsmRows& rows = tracker.layer(sm);
    if (rows.rows() != nReg + T)
      throw Error("sweep --hidden-attention: SSM layer " + std::to_string(sm) + " kept " +
                  std::to_string(rows.rows()) + " rows of " + std::to_string(nReg + T));
    // Mamba-2: one row per head; Mamba-1: the mean |M| over the channels (head −1), one "head".
    for (int64_t h = 0; h < hidden_heads(*m, i); ++h)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t r = nReg + t, n = r + 1;
        hidden_attention_head_or_mean_row(rows, rows.mamba1 ? -1 : h, r, row.data());
        const HiddenRowStats st = hidden_row_stats(row.data(), n);
        // The first token's key is column nReg (as attn_first_mass); an all-zero row is uniform.
        const double first =
            st.abs_sum > 0 ? std::fabs(static_cast<double>(row[static_cast<size_t>(nReg)])) / st.abs_sum
                           : 1.0 / static_cast<double>(n);
        values.push_back(st.entropy);
        values.push_back(first);
      }
  }
  if (!link || link->size() == 1) {
    add_values(stats, *m, mine, T, values.data());
    return;
  }
  // A pipeline: stage 0 (the writer) adds every stage's values in layer order, as one process would.
  if (link->rank() != 0) {
    std::vector<uint8_t> bytes(values.size() * sizeof(double));
    if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
    send_bytes(*link, 0, bytes);
    return;
  }
  add_values(stats, *m, mine, T, values.data());
  for (int r = 1; r < link->size(); ++r) {
    const LayerRange theirs = ranges[static_cast<size_t>(r)];
    const std::vector<uint8_t> bytes = recv_bytes(*link, r);
    const size_t want = static_cast<size_t>(hidden_values(*m, theirs, T));
    if (bytes.size() != want * sizeof(double))
      throw Error("sweep --hidden-attention: stage " + std::to_string(r) + " sent " + std::to_string(bytes.size()) +
                  " bytes, expected " + std::to_string(want * sizeof(double)));
    std::vector<double> v(want);
    if (want) std::memcpy(v.data(), bytes.data(), bytes.size());
    add_values(stats, *m, theirs, T, v.data());
  }
}

}  // namespace hl
