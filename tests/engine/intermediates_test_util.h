// The one test body of a device backend's named intermediates (model/intermediates.h) against the
// plain-loop reference forward (engine/reference), shared by test_vulkan_intermediates.cpp and
// test_cuda_intermediates.cpp: every name and row the backend reports, by decode steps and by one
// prefill, over oracle_cases.h, and observing leaving the records bit for bit as they were. Not the
// comparison itself (reference_test_util.h) nor the CPU's (test_reference_oracle.cpp).
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/model/loader.h"
#include "engine/reference/ref_model.h"
#include "tests/engine/golden_util.h"
#include "tests/engine/oracle_cases.h"
#include "tests/engine/reference_test_util.h"

namespace hl::reftest {

// A device backend as the body sees it: how to make one, how to set its observer, and which names it
// reports for a row of a block of `block_rows` rows (the others it never materialises there).
struct ObservedBackend {
  std::string name;  // "vulkan": names the comparison in failures
  std::function<std::unique_ptr<Backend>(std::shared_ptr<const Model>)> make;
  std::function<void(Backend&, IntermediateObserver)> set_observer;
  std::function<bool(const std::string& name, int64_t block_rows)> reports;
};

inline std::set<std::string> names_of(const Recording& r) {
  std::set<std::string> s;
  for (const auto& [k, v] : r) s.insert(std::get<0>(k));
  return s;
}

// Rows of the block that run row `row` belongs to, when `registers` register rows are fed in one block
// at start and then `tokens` tokens by decode steps (one row each) or one prefill block (the oracle
// cases are far below every backend's block limit).
inline int64_t block_rows(int64_t row, int64_t registers, int64_t tokens, bool prefill) {
  if (row < registers) return registers;
  return prefill ? tokens : 1;
}

// The rows of `all` (the reference's recording) that `b` reports for that run.
inline Recording reported_rows(const Recording& all, const ObservedBackend& b, int64_t registers, int64_t tokens,
                               bool prefill) {
  Recording kept;
  for (const auto& [k, v] : all)
    if (b.reports(std::get<0>(k), block_rows(std::get<2>(k), registers, tokens, prefill))) kept.emplace(k, v);
  return kept;
}

inline Recording reference_recording(const OracleCase& c) {
  Recording all;
  ref::ReferenceModel r(load_model(case_dir(c.dir)));
  r.set_observer(recorder(&all));
  r.run(c.ids, c.opts);
  return all;
}

// The backend's intermediates of case `c`, by decode steps or one prefill, against the reference's
// that it reports: exactly those keys (a name or row the backend loses fails), each within
// rel·|ref| + abs·scale.
inline void expect_intermediates_match_reference(const ObservedBackend& b, const OracleCase& c, bool prefill,
                                                 double rel, double abs) {
  Recording got;
  std::unique_ptr<Backend> be = b.make(load_model(case_dir(c.dir)));
  b.set_observer(*be, recorder(&got));
  golden_test::run_tokens(*be, c.ids, c.opts, prefill);
  const Recording want =
      reported_rows(reference_recording(c), b, be->registers(), static_cast<int64_t>(c.ids.size()), prefill);
  const std::string what = b.name + (prefill ? " prefill" : " decode") + " vs reference";
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(names_of(got), names_of(want)) << what;
  report(c.name + (prefill ? " prefill" : " decode"), expect_recordings_close(got, want, rel, abs, what));
}

// Observing changes no result: the records with an observer are bit for bit those without, and
// clearing the observer stops the reports; by decode steps and by one prefill.
inline void expect_observing_leaves_records_unchanged(const ObservedBackend& b, const OracleCase& c) {
  auto model = load_model(case_dir(c.dir));
  for (bool prefill : {false, true}) {
    std::unique_ptr<Backend> be = b.make(model);
    const std::vector<TokenTrace> plain = golden_test::run_tokens(*be, c.ids, c.opts, prefill);
    Recording rec;
    b.set_observer(*be, recorder(&rec));
    const std::vector<TokenTrace> seen = golden_test::run_tokens(*be, c.ids, c.opts, prefill);
    ASSERT_FALSE(rec.empty());
    ASSERT_EQ(seen.size(), plain.size());
    for (size_t t = 0; t < plain.size(); ++t)
      EXPECT_EQ(0, std::memcmp(seen[t].logits.data(), plain[t].logits.data(), plain[t].logits.size() * 4))
          << b.name << " token " << t << (prefill ? " prefill" : " decode");
    b.set_observer(*be, {});
    rec.clear();
    golden_test::run_tokens(*be, c.ids, c.opts, prefill);
    EXPECT_TRUE(rec.empty()) << b.name;
  }
}

}  // namespace hl::reftest
