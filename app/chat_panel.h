// ChatPanel: the prompt area's Chat mode (issue 16 item 4) — an editable list of turns (system /
// user / assistant), "add generation prompt", and the checkpoint's chat template rendered live with
// its token count and tokens. A form only: the run feeds renderedText() without an added BOS.
// Not the renderer (engine/tokenizer/chat_template.h) and not the run (main_window_run.cpp).
#pragma once
#include <QWidget>
#include <memory>
#include <optional>

#include "engine/tokenizer/chat_template.h"

class QCheckBox;
class QLabel;
class QPlainTextEdit;
class QPushButton;
class QSettings;
class QTableWidget;

namespace hl {
class Tokenizer;
}

namespace hl::app {

class ChatPanel : public QWidget {
  Q_OBJECT

 public:
  explicit ChatPanel(QWidget* parent = nullptr);
  ~ChatPanel() override;

  // The checkpoint's template (nullopt: none) and the tokenizer that counts the rendered tokens
  // (null: none). Re-renders.
  void setTemplate(const std::optional<hl::ChatTemplateSource>& tpl, std::shared_ptr<const hl::Tokenizer> tok);
  bool hasTemplate() const { return tpl_.has_value(); }

  struct Turn {
    QString role, content;
  };
  QList<Turn> turns() const;
  void setTurns(const QList<Turn>& turns);
  bool addGenerationPrompt() const;
  void setAddGenerationPrompt(bool on);

  // The rendered text, or "" with error() saying why (no template, a template error).
  QString renderedText() const { return rendered_; }
  QString error() const { return error_; }
  int tokenCount() const { return static_cast<int>(tokens_.size()); }
  const std::vector<int32_t>& tokens() const { return tokens_; }

  void saveSettings(QSettings& s) const;
  void restoreSettings(QSettings& s);

 signals:
  void renderedChanged();

 private:
  void addTurn(const QString& role, const QString& content);
  void render();

  QTableWidget* table_ = nullptr;
  QPushButton *add_ = nullptr, *remove_ = nullptr;
  QCheckBox* genPrompt_ = nullptr;
  QPlainTextEdit* preview_ = nullptr;
  QLabel* status_ = nullptr;
  std::optional<hl::ChatTemplateSource> tpl_;
  std::shared_ptr<const hl::Tokenizer> tok_;
  QString rendered_, error_;
  std::vector<int32_t> tokens_;
};

}  // namespace hl::app
