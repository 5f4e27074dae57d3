// Access to the attention rows of a trace record for the attention pattern view and its head grid:
// row t of (attention ordinal, head) holds n_reg + t + 1 key weights followed by p_null
// (trace-format.md §3 attn_rows). Internal to views/attention_*.cpp; no Qt widgets.
#pragma once
#include <QString>
#include <cstdint>

#include "views/view_util.h"

namespace hl::views::attn {

inline bool hasRows(const hl::Run* run) {
  return run && !run->records.empty() && !run->records[0].attn_rows.empty();
}

// Row t of (ord, head): pointer to n_reg + t + 1 key weights followed by p_null.
inline const float* rowPtr(const hl::TokenTrace& r, int ord, int head, int nh, int nReg, int t) {
  const int64_t have = int64_t{nReg} + t + 2;
  return r.attn_rows.data() + (int64_t{ord} * nh + head) * have;
}

// Name of key column `key`: "reg k" for a register, else the token's text.
inline QString keyLabel(const hl::Recording& rec, int nReg, int key) {
  return key < nReg ? QStringLiteral("reg %1").arg(key) : tokenLabel(rec, key - nReg);
}

}  // namespace hl::views::attn
