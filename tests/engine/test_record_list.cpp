// RecordList (sessions/record_list.h, issue 17 item 2): copies of a run share its records instead
// of copying them, edit() copies a shared record before writing so the other holders never see the
// change, and the list reads like the vector it replaced (size, index, iteration, resize).
#include <gtest/gtest.h>

#include "sessions/recording.h"

namespace {

hl::TokenTrace record(int32_t id, size_t rows) {
  hl::TokenTrace r;
  r.token_id = id;
  r.attn_rows.assign(rows, 0.5f);
  return r;
}

}  // namespace

TEST(RecordList, CopyOfARun_SharesEveryRecord) {
  hl::Run a;
  for (int t = 0; t < 5; ++t) a.records.push_back(record(t, 100 + t));
  const hl::Run b = a;  // what the autosave snapshot and the compare run do
  ASSERT_EQ(b.records.size(), 5u);
  for (size_t t = 0; t < 5; ++t) {
    EXPECT_EQ(&a.records[t], &b.records[t]) << "token " << t;
    EXPECT_EQ(a.records.holders(t), 2);
  }
  // Appending to one leaves the other as it was: the lists are separate, the records shared.
  a.records.push_back(record(5, 1));
  EXPECT_EQ(a.records.size(), 6u);
  EXPECT_EQ(b.records.size(), 5u);
}

TEST(RecordList, EditOfASharedRecord_CopiesItFirst) {
  hl::RecordList a;
  a.push_back(record(7, 3));
  hl::RecordList b = a;
  a.edit(0).token_id = 8;
  EXPECT_EQ(a[0].token_id, 8);
  EXPECT_EQ(b[0].token_id, 7) << "the other holder saw the write";
  EXPECT_EQ(a.holders(0), 1);
  const hl::TokenTrace* before = &a[0];
  a.edit(0).token_id = 9;  // not shared any more: written in place
  EXPECT_EQ(&a[0], before);
}

TEST(RecordList, ReadsLikeAVector) {
  std::vector<hl::TokenTrace> v;
  for (int t = 0; t < 4; ++t) v.push_back(record(10 + t, 2));
  hl::RecordList l = std::move(v);
  ASSERT_EQ(l.size(), 4u);
  int sum = 0;
  for (const hl::TokenTrace& r : l) sum += r.token_id;
  EXPECT_EQ(sum, 10 + 11 + 12 + 13);
  int rsum = 0, n = 0;
  for (auto it = l.rbegin(); it != l.rend(); ++it, ++n) rsum += it->token_id * (n + 1);
  EXPECT_EQ(rsum, 13 * 1 + 12 * 2 + 11 * 3 + 10 * 4);
  EXPECT_EQ(l.back().token_id, 13);
  l.resize(2);
  EXPECT_EQ(l.size(), 2u);
  l.resize(3);
  EXPECT_EQ(l[2].token_id, 0);
  EXPECT_TRUE(l[2].attn_rows.empty());
  l.pop_back();
  l.clear();
  EXPECT_TRUE(l.empty());
}
