// Runs compared token by token (issue 17 finding 3): with registers in run B only, the attention
// row bars of A and B stand at the same x for the same token, registers apart at negative x, and
// the tick labels name tokens, not slots. Checked against the records' attn_rows directly.
#include <gtest/gtest.h>

#include "tests/views/view_test_util.h"
#include "views/instrument_views.h"

using namespace hl::views;

TEST(AttentionAlignment, RegistersInB_BarsOfTheSameTokenShareX) {
  const hl::test::DemoData& d = hl::test::demo();
  hl::RunOptions o;
  o.full = true;
  o.registers = 2;
  hl::Recording rec = d.rec;
  hl::Run b;
  b.label = "B";
  b.settings.registers = 2;
  b.settings.registers_used = 2;
  std::vector<int32_t> tokens(rec.tokens.begin(), rec.tokens.begin() + 5);
  b.records = hl::test::runEngine(*d.model, tokens, o);
  rec.runs.resize(1);
  rec.runs.push_back(std::move(b));
  ViewState st;
  st.rec = &rec;
  st.a = &rec.runs[0];
  st.b = &rec.runs[1];
  st.step = 4;
  st.layer = 2;
  AttentionPatternView v;
  v.resize(900, 600);
  v.setState(st);
  QCPBars* ba = v.bars("row A");
  QCPBars* bb = v.bars("row B");
  ASSERT_NE(ba, nullptr);
  ASSERT_NE(bb, nullptr);
  const ModelShape s = modelShape(rec.config);
  const int ord = s.attnOrdinal(2), nh = s.nh, t = 4;
  const std::vector<float>& rowB = rec.runs[1].records[t].attn_rows;  // (A_n, nh, 2 + t + 2)
  const int haveB = 2 + t + 2;
  // Run B's bars: registers at x = −2, −1; token j at x = j; the null slot at t + 2.
  ASSERT_EQ(bb->dataCount(), haveB);
  for (int i = 0; i < haveB; ++i) {
    const double x = (bb->data()->constBegin() + i)->key;
    const double want = i < 2 + t + 1 ? i - 2 : t + 2;
    EXPECT_EQ(x, want) << "slot " << i;
    EXPECT_EQ((bb->data()->constBegin() + i)->value, rowB[(ord * nh) * haveB + i]) << "slot " << i;
  }
  // Run A (no registers): token j at the same x = j.
  for (int j = 0; j <= t; ++j) EXPECT_EQ((ba->data()->constBegin() + j)->key, j) << "token " << j;
}
