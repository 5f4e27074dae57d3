// GUI tests of the prompt's Chat mode (app/chat_panel.h, issue 16 item 4), offscreen: a demo
// checkpoint with tests/data/tiny_spm.model and a ChatML template in tokenizer_config.json renders
// the turns as the hand-written expected text, counts its tokens with the tokenizer, and the run
// feeds exactly those tokens (no BOS added); a checkpoint without a template disables Chat mode
// with a tooltip saying why. The token strip marks the tokenizer's special tokens (BOS) from the
// engine, as pending and as fed chips, and again when the session is reopened (issue 16 item 5).
#include <gtest/gtest.h>

#include <QComboBox>
#include <QLabel>
#include <QStandardItemModel>
#include <fstream>

#include "app/chat_panel.h"
#include "app/token_strip.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/app/gui_test_util.h"

namespace hl::test {
namespace {

const char* kChatMl =
    R"({"bos_token": "<s>", "eos_token": "</s>", "chat_template": "{{ bos_token }}{% for m in messages %})"
    R"({{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{% endfor %}{% if )"
    R"(add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"})";

// demo-random with a tokenizer (and, when `tpl`, tokenizer_config.json with a chat template).
QString chatDemo(const TempDir& tmp, bool tpl) {
  const fs::path dir = tmp.path / (tpl ? "with-template" : "no-template");
  makeDemo(dir, 3);
  fs::copy_file(fs::path(HL_TEST_DATA_DIR) / "tiny_spm.model", dir / "tokenizer.model");
  if (tpl) std::ofstream(dir / "tokenizer_config.json") << kChatMl;
  return QString::fromStdString(dir.string());
}

QStandardItem* chatItem(hl::app::RunPanel* p) {
  auto* mode = p->findChild<QComboBox*>("promptMode");
  return qobject_cast<QStandardItemModel*>(mode->model())->item(2);
}

TEST(ChatMode, RendersTurns_CountsTokens_AndTheRunFeedsThem) {
  TempDir tmp("chat");
  Harness h;
  ASSERT_TRUE(h.load(chatDemo(tmp, true)));
  hl::app::RunPanel* panel = h->runPanel();
  ASSERT_TRUE(chatItem(panel)->isEnabled()) << chatItem(panel)->toolTip().toStdString();
  panel->findChild<QComboBox*>("promptMode")->setCurrentIndex(2);
  ASSERT_TRUE(panel->chatMode());
  EXPECT_FALSE(panel->addBos());

  hl::app::ChatPanel* chat = panel->chatPanel();
  ASSERT_TRUE(chat->isVisible());
  chat->setTurns({{"system", "Be brief."}, {"user", "the river"}});
  chat->setAddGenerationPrompt(false);
  EXPECT_EQ(chat->renderedText().toStdString(),
            "<s><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nthe river<|im_end|>\n");
  chat->setAddGenerationPrompt(true);
  const std::string rendered =
      "<s><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nthe river<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(chat->renderedText().toStdString(), rendered);
  EXPECT_EQ(panel->promptText().toStdString(), rendered);

  const std::vector<int32_t> want = hl::Tokenizer::load(std::string(HL_TEST_DATA_DIR) + "/tiny_spm.model")->encode(rendered);
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(chat->tokens(), want);
  EXPECT_NE(chat->findChild<QLabel*>("chatStatus")->text().indexOf(QStringLiteral("%1 tokens").arg(want.size())), -1);

  // Reset feeds the rendered chat: stepping through the prompt gives exactly its tokens.
  bool started = false;
  auto c = QObject::connect(h.w.get(), &hl::app::MainWindow::runStarted, [&] { started = true; });
  ASSERT_TRUE(h->resetRun());
  ASSERT_TRUE(waitFor([&] { return started; }));
  QObject::disconnect(c);
  ASSERT_TRUE(h.settle());
  ASSERT_TRUE(h.step(static_cast<int64_t>(want.size())));
  ASSERT_EQ(h.records(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(h->runA()->records[i].token_id, want[i]) << "token " << i;
  EXPECT_TRUE(h.errors.isEmpty()) << h.errors.join('\n').toStdString();
}

TEST(ChatMode, NoTemplate_ChatDisabledWithTooltipSayingWhy) {
  TempDir tmp("chat-none");
  Harness h;
  ASSERT_TRUE(h.load(chatDemo(tmp, false)));
  QStandardItem* item = chatItem(h->runPanel());
  EXPECT_FALSE(item->isEnabled());
  EXPECT_NE(item->toolTip().indexOf(QStringLiteral("no chat template")), -1) << item->toolTip().toStdString();
  EXPECT_FALSE(h->runPanel()->chatMode());
  EXPECT_FALSE(h->runPanel()->chatPanel()->isVisible());
}

// tiny_spm.model's ids 1 and 2 are its BOS and EOS control pieces, 300 and 301 learned pieces of text
// (tests/data/README.md). The strip marks chips 0 and 2 only, whatever produced them: the run start
// (pending), the steps (fed), and the reopened session (the loaded model's tokenizer).
TEST(TokenStrip, MarksSpecialTokens_NotOrdinaryOnes) {
  TempDir tmp("strip-special");
  const std::unique_ptr<hl::Tokenizer> tok = hl::Tokenizer::load(std::string(HL_TEST_DATA_DIR) + "/tiny_spm.model");
  ASSERT_EQ(tok->piece(1), "<|startoftext|>");
  ASSERT_EQ(tok->piece(2), "<|endoftext|>");
  for (const int32_t id : {300, 301}) ASSERT_NE(tok->piece(id).find('<'), 0u) << "piece " << id;
  Harness h;
  ASSERT_TRUE(h.load(chatDemo(tmp, false), QStringLiteral("1, 300, 2, 301")));
  hl::app::TokenStrip* strip = h->tokenStrip();
  auto expectMarks = [&](const char* when) {
    ASSERT_EQ(strip->count(), 4) << when;
    for (int i = 0; i < 4; ++i) {
      const bool special = i == 0 || i == 2;
      EXPECT_EQ(strip->chip(i).special, special) << when << ": chip " << i;
      EXPECT_EQ(strip->chipToolTip(i).contains(QStringLiteral("special token")), special) << when << ": chip " << i;
    }
  };
  expectMarks("pending");
  ASSERT_TRUE(h.step(4));
  ASSERT_EQ(strip->fedCount(), 4);
  expectMarks("fed");
  const QString file = tmp.q("special.hlsession");
  ASSERT_TRUE(save(h, file)) << h.errors.join('\n').toStdString();
  bool resumed = false;
  auto c = QObject::connect(h.w.get(), &hl::app::MainWindow::sessionResumed, [&] { resumed = true; });
  ASSERT_TRUE(h->openSession(file) && waitFor([&] { return resumed || !h.errors.isEmpty(); }));
  QObject::disconnect(c);
  ASSERT_TRUE(h.settle());
  expectMarks("reopened");
  EXPECT_TRUE(h.errors.isEmpty()) << h.errors.join('\n').toStdString();
}

}  // namespace
}  // namespace hl::test
