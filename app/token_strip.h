// TokenStrip: every token of the run, prompt and generated, as chips that wrap in lines; tokens of
// the prompt not fed yet are dimmed, the current step is highlighted, and clicking a fed token
// scrubs to it (issue 5 item 2). Paints only the visible lines, so thousands of tokens stay cheap.
#pragma once
#include <QScrollArea>
#include <QString>
#include <vector>

namespace hl::app {

class TokenCanvas;

class TokenStrip : public QScrollArea {
  Q_OBJECT

 public:
  struct Chip {
    QString text;  // the token's text ("" without a tokenizer: "#id" is shown)
    int id = 0;
    bool generated = false;  // sampled rather than part of the prompt
    bool differs = false;    // run B's top-1 differs here (a red underline)
    bool special = false;    // a special token (BOS/EOS, chat template): italic, dotted grey outline
  };

  explicit TokenStrip(QWidget* parent = nullptr);

  // Replaces every chip; [0, fed) are fed, the rest pending.
  void setTokens(const std::vector<Chip>& chips, int fed);
  // A newly fed token: the next pending chip when it matches, else appended.
  void feed(const Chip& chip);
  // Marks token `index` where run B's top-1 next token differs from A's; `note` (e.g. "A predicts
  // “x”, B predicts “y”") goes into the chip's tooltip.
  void setDiffers(int index, bool differs, const QString& note = QString());
  // The tooltip text of chip i (what hovering it shows).
  QString chipToolTip(int i) const;
  void setCurrent(int index);  // -1: none
  void clear() { setTokens({}, 0); }

  int count() const;  // chips shown, fed and pending
  int fedCount() const;
  int current() const;
  const Chip& chip(int i) const;
  QString displayText(int i) const;  // what the chip shows
  QRect chipRect(int i) const;       // in the canvas (for tests: a click there scrubs)
  QWidget* canvas() const;

 signals:
  void tokenClicked(int index);

 private:
  TokenCanvas* canvas_ = nullptr;
};

}  // namespace hl::app
