// Helpers of the reference oracle tests: recording the named intermediates a backend or the reference
// reports (model/intermediates.h) split into rows, and comparing two recordings tensor by tensor so
// that a mismatch names the tensor, the layer and the row. Not the comparison of records
// (trace_compare_util.h).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "engine/model/intermediates.h"

namespace hl::reftest {

// (name, layer, row) → the row's values.
using Key = std::tuple<std::string, int64_t, int64_t>;
using Recording = std::map<Key, std::vector<float>>;

// An observer that files every row of every intermediate into *rec.
inline IntermediateObserver recorder(Recording* rec) {
  return [rec](const Intermediate& t) {
    for (int64_t r = 0; r < t.rows; ++r) {
      const float* p = t.data + r * t.stride;
      (*rec)[Key{t.name, t.layer, t.row + r}] = std::vector<float>(p, p + t.cols);
    }
  };
}

// The largest |Δ| / scale per (name, layer) of a comparison, scale = max(1, max |ref|) over the rows.
struct Worst {
  double rel = 0;  // max |Δ| / scale
  double scale = 1;
};

// `got` against `ref`: the same keys, every value within rel·|ref| + abs·scale, scale over all rows of
// that (name, layer). Fails at the first differing row of each (name, layer), naming it. Returns the
// worst |Δ| / scale per name (over layers) for the record.
inline std::map<std::string, Worst> expect_recordings_close(const Recording& got, const Recording& ref, double rel,
                                                            double abs, const std::string& what) {
  std::map<std::string, Worst> worst;
  std::vector<std::string> missing, extra;
  for (const auto& [k, v] : ref)
    if (!got.count(k)) missing.push_back(std::get<0>(k) + " layer " + std::to_string(std::get<1>(k)));
  for (const auto& [k, v] : got)
    if (!ref.count(k)) extra.push_back(std::get<0>(k) + " layer " + std::to_string(std::get<1>(k)));
  EXPECT_TRUE(missing.empty()) << what << ": " << missing.size() << " rows not reported, first: " << missing[0];
  EXPECT_TRUE(extra.empty()) << what << ": " << extra.size() << " rows the reference lacks, first: " << extra[0];
  std::map<std::pair<std::string, int64_t>, double> scale;
  for (const auto& [k, v] : ref)
    for (float x : v) {
      double& s = scale.try_emplace({std::get<0>(k), std::get<1>(k)}, 1.0).first->second;
      s = std::max(s, static_cast<double>(std::fabs(x)));
    }
  std::map<std::pair<std::string, int64_t>, bool> reported;
  for (const auto& [k, b] : ref) {
    auto it = got.find(k);
    if (it == got.end()) continue;
    const std::vector<float>& a = it->second;
    const auto nl = std::make_pair(std::get<0>(k), std::get<1>(k));
    const double sc = scale[nl];
    if (a.size() != b.size()) {
      ADD_FAILURE() << what << ": " << nl.first << " layer " << nl.second << " row " << std::get<2>(k) << " has "
                    << a.size() << " values, the reference " << b.size();
      continue;
    }
    Worst& w = worst[nl.first];
    for (size_t i = 0; i < b.size(); ++i) {
      const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
      w.rel = std::max(w.rel, d / sc);
      if (d <= rel * std::fabs(b[i]) + abs * sc || reported[nl]) continue;
      reported[nl] = true;
      ADD_FAILURE() << what << ": " << nl.first << " of layer " << nl.second << " differs first at row "
                    << std::get<2>(k) << ", index " << i << ": " << a[i] << " vs reference " << b[i] << " (|Δ| " << d
                    << ", scale " << sc << ")";
    }
  }
  return worst;
}

}  // namespace hl::reftest
