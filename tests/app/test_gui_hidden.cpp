// The attention pattern view on SSM layers (issue 15 item 4, issue 17 item 6): choosing a Mamba layer
// of the demo model shows its hidden attention (Ali, Zimerman & Wolf 2024) for the scrubbed token, as
// the engine's probe computes it on a run of its own over the same tokens; scrubbing, the head box, the
// layer box and the CSV follow it, and an attention layer shows its heads again.
#include <gtest/gtest.h>

#include <QComboBox>
#include <vector>

#include "app/inspector_context.h"
#include "engine/model/loader.h"
#include "engine/probes/hidden_attention.h"
#include "gui_test_util.h"
#include "sessions/recorder.h"
#include "views/instrument_views.h"

using namespace hl::test;  // Harness, waitFor, demoDir

namespace {

TEST(HiddenAttentionView, SsmLayer_ShowsTheScrubbedTokensRow_AsTheProbeComputesIt) {
  Harness h;
  ASSERT_TRUE(h.load(demoDir(), QStringLiteral("1, 5, 9, 13, 2, 7, 3, 8, 4, 6")));
  ASSERT_TRUE(h.step(10));
  auto* v = qobject_cast<hl::views::AttentionPatternView*>(h->view("attention"));
  ASSERT_NE(v, nullptr);
  const hl::LayerSchedule& s = h->modelInfo()->schedule;
  ASSERT_GE(s.ssm_layers().size(), 2u);
  const int layer = static_cast<int>(s.ssm_layers()[1]);
  h->selectLayer(layer);
  h->updateAllViews();
  ASSERT_TRUE(v->showsHidden());
  auto arrived = [&](int token, int head) {
    const hl::views::HiddenPattern* p = h->context()->hiddenPattern();
    return p && p->complete && p->layer == layer && p->token == token && p->head == head;
  };

  // What the view must show: the probe on a tracker of its own over run A's tokens.
  std::vector<int32_t> ids;
  for (size_t i = 0; i < h->runA()->records.size(); ++i) ids.push_back(h->runA()->records[i].token_id);
  ASSERT_EQ(ids.size(), 10u);
  hl::HiddenAttentionTracker probe(hl::load_model(demoDir().toStdString()), hl::run_options(h->runA()->settings));
  probe.follow(ids.data(), static_cast<int64_t>(ids.size()));
  const hl::SsmRows& rows = probe.layer(s[layer].ssm_index);
  auto expectRow = [&](int token, int head) {
    SCOPED_TRACE("token " + std::to_string(token) + ", head " + std::to_string(head));
    const int n = probe.registers() + token + 1;
    std::vector<float> want(static_cast<size_t>(n));
    hl::hidden_attention_head_or_mean_row(rows, head, n - 1, want.data());
    float scale = 0;
    for (float x : want) scale = std::max(scale, std::fabs(x));
    QCPBars* bars = v->bars(QStringLiteral("row A"));
    ASSERT_NE(bars, nullptr);
    ASSERT_EQ(bars->data()->size(), n);
    int i = 0;
    for (auto it = bars->data()->constBegin(); it != bars->data()->constEnd(); ++it, ++i) {
      EXPECT_DOUBLE_EQ(it->key, i - probe.registers());
      EXPECT_NEAR(it->value, want[static_cast<size_t>(i)], 1e-5 * scale + 1e-12) << "key " << i;
    }
  };

  ASSERT_TRUE(waitFor([&] { return arrived(9, -1); }, 30000));
  h->updateAllViews();
  expectRow(9, -1);
  EXPECT_TRUE(v->figureTitle().contains(QStringLiteral("hidden attention"))) << v->figureTitle().toStdString();
  EXPECT_TRUE(v->figureTitle().contains(QStringLiteral("entropy"))) << v->figureTitle().toStdString();
  hl::views::HeatmapPlottable* map = v->heatmap(QStringLiteral("hidden A"));
  ASSERT_NE(map, nullptr);
  EXPECT_EQ(map->heatmap()->rows(), 10);  // ten queries fit the budget: the whole matrix
  EXPECT_EQ(v->heatmap(QStringLiteral("keys A")), nullptr);

  // Scrubbing back asks for that token's row.
  h->scrubTo(4);
  h->updateAllViews();
  ASSERT_TRUE(waitFor([&] { return arrived(4, -1); }, 30000));
  h->updateAllViews();
  expectRow(4, -1);

  // One channel instead of the mean.
  v->setHiddenHead(3);
  ASSERT_TRUE(waitFor([&] { return arrived(4, 3); }, 30000));
  h->updateAllViews();
  expectRow(4, 3);

  // The CSV holds every key of every query drawn: 1 + 2 + ... + 5 rows (no registers here).
  ASSERT_EQ(probe.registers(), 0);
  const QString csv = v->csv();
  EXPECT_TRUE(csv.startsWith(QStringLiteral("run,layer,head,query,key,key_label,M"))) << csv.left(80).toStdString();
  EXPECT_EQ(csv.count('\n'), 1 + 15);

  // The layer box lists attention layers and SSM layers; an attention layer shows its heads again.
  auto* box = v->findChild<QComboBox*>(QStringLiteral("attentionLayer"));
  ASSERT_NE(box, nullptr);
  EXPECT_EQ(box->count(), static_cast<int>(s.attention_layers().size() + s.ssm_layers().size()));
  EXPECT_EQ(box->currentData().toInt(), 2 * layer + 1);
  h->selectLayer(static_cast<int>(s.attention_layers()[0]));
  h->updateAllViews();
  EXPECT_FALSE(v->showsHidden());
  EXPECT_NE(v->heatmap(QStringLiteral("keys A")), nullptr);
}

}  // namespace
