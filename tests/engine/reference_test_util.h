// Helpers of the reference oracle tests: recording the named intermediates a backend or the reference
// reports (model/intermediates.h) split into rows, and comparing two recordings tensor by tensor so
// that a mismatch names the tensor, the layer and the row. Not the comparison of records
// (trace_compare_util.h).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iterator>
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

// Where an intermediate comes in the forward pass: layer by layer, within a layer in the order of
// kIntermediates; embed before every layer, final_norm and logits after them.
inline std::pair<int64_t, int> forward_order(const std::string& name, int64_t layer) {
  int order = 0;
  for (const IntermediateName& n : kIntermediates) {
    if (name == n.name) break;
    ++order;
  }
  const bool tail = layer < 0 && name != "embed";
  return {tail ? INT64_MAX : layer, order};
}

// `got` against `ref`: the same keys, every value within rel·|ref| + abs·scale, scale over all rows of
// that (name, layer). One failure that names the first differing tensor in forward order (layer,
// tensor, row, index), then up to 5 more. Returns the worst |Δ| / scale per name (over layers and rows).
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
  // (forward position, row) → message, the first difference of each (name, layer, row).
  std::map<std::tuple<int64_t, int, int64_t>, std::string> diffs;
  for (const auto& [k, b] : ref) {
    auto it = got.find(k);
    if (it == got.end()) continue;
    const std::vector<float>& a = it->second;
    const auto& [name, layer, row] = k;
    const double sc = scale[{name, layer}];
    const auto [depth, order] = forward_order(name, layer);
    const std::string where = name + " of " +
                              (layer < 0 ? std::string("the model") : "layer " + std::to_string(layer)) + ", row " +
                              std::to_string(row);
    if (a.size() != b.size()) {
      diffs.emplace(std::make_tuple(depth, order, row),
                    where + ": " + std::to_string(a.size()) + " values, the reference " + std::to_string(b.size()));
      continue;
    }
    Worst& w = worst[name];
    bool noted = false;
    for (size_t i = 0; i < b.size(); ++i) {
      const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
      w.rel = std::max(w.rel, d / sc);
      if (d <= rel * std::fabs(b[i]) + abs * sc || noted) continue;
      noted = true;
      diffs.emplace(std::make_tuple(depth, order, row),
                    where + ", index " + std::to_string(i) + ": " + std::to_string(a[i]) + " vs reference " +
                        std::to_string(b[i]) + " (|diff| " + std::to_string(d) + ", scale " + std::to_string(sc) + ")");
    }
  }
  if (!diffs.empty()) {
    std::string msg = what + ": first mismatch at " + diffs.begin()->second;
    int shown = 0;
    for (auto it = std::next(diffs.begin()); it != diffs.end() && shown < 5; ++it, ++shown)
      msg += "\n  then " + it->second;
    ADD_FAILURE() << msg << "\n  (" << diffs.size() << " tensor rows differ in all)";
  }
  return worst;
}

}  // namespace hl::reftest
