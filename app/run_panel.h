// RunPanel: the prompt editor, the stepping buttons (Reset, Step, Run N, Run to end, Stop), the
// sampling settings and the toggles (normalizer, registers, adapter) with "show B − A" — issue 5
// items 2 and 4. A form only: it emits what the user asked and the main window does it.
#pragma once
#include <QWidget>
#include <memory>
#include <optional>

#include "app/engine_types.h"
#include "engine/tokenizer/chat_template.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QPlainTextEdit;
class QPushButton;
class QSettings;
class QSpinBox;

namespace hl {
class Tokenizer;
}

namespace hl::app {

class ChatPanel;

class RunPanel : public QWidget {
  Q_OBJECT

 public:
  explicit RunPanel(QWidget* parent = nullptr);

  // The prompt as typed: text for the tokenizer, or token ids ("1, 5, 9"); in Chat mode the chat
  // rendered with the checkpoint's template ("" when it cannot be rendered: chatPanel()->error()).
  QString promptText() const;
  void setPromptText(const QString& t);
  bool idsMode() const;
  void setIdsMode(bool ids);  // false leaves Chat mode as it is
  bool chatMode() const;
  void setTokenizerAvailable(bool available);  // without one only ids can be typed
  // Chat mode is enabled with a template and a tokenizer; otherwise disabled, its tooltip says why.
  void setChatTemplate(const std::optional<hl::ChatTemplateSource>& tpl, std::shared_ptr<const hl::Tokenizer> tok,
                       const QString& loadError = {});
  ChatPanel* chatPanel() const { return chat_; }
  bool addBos() const;  // false in Chat mode: the template writes BOS
  int runCount() const;  // N of Run N
  hl::SamplingOptions sampling() const;
  int64_t maxNewTokens() const;
  Toggles toggles() const;
  void setToggles(const Toggles& t);  // without emitting togglesChanged
  void setAdapterAvailable(bool available);
  bool showDiff() const;
  void setShowDiff(bool on);

  // Enabling: what may be pressed now. busy: a command runs (Stop enabled); canStep: a model and a
  // run exist; viewOnly: a session without its checkpoint (no stepping, no toggles).
  void setState(bool haveModel, bool busy, bool canStep, bool viewOnly);
  void setRunSummary(const QString& text);  // "run A: softmax (as trained), 0 registers — run B: …"

  // Says whether the prompt box still holds the prompt of the live run (issue 17 finding 1): an empty
  // note hides it.
  void setPromptNote(const QString& note);
  QString promptNote() const;

  void saveSettings(QSettings& s) const;
  // Restores the remembered values, each checked: one out of range is replaced by its default and
  // named in the returned lines ("max new 1000000 is outside [1, 65536]: 64"), so that a bad value
  // is said once and not remembered again (issue 17 finding 8).
  QStringList restoreSettings(QSettings& s);
  static constexpr int kMaxNewTokens = 65536;  // full records grow as T²: 64 Ki tokens is ~tens of GB

  QPlainTextEdit* promptEdit() const { return prompt_; }

 signals:
  void resetRequested();
  void stepRequested(int64_t n);  // n < 0: run to the end
  void stopRequested();
  void togglesChanged();
  void showDiffChanged(bool on);
  void promptEdited();  // the text, the text/ids mode or BOS changed

 private:
  QPlainTextEdit* prompt_ = nullptr;
  ChatPanel* chat_ = nullptr;
  bool wantChat_ = false;  // Chat mode chosen (or restored) while the checkpoint had no template
  QComboBox* mode_ = nullptr;
  QCheckBox* bos_ = nullptr;
  QPushButton *reset_ = nullptr, *step_ = nullptr, *runN_ = nullptr, *runEnd_ = nullptr, *stop_ = nullptr;
  QSpinBox* n_ = nullptr;
  QDoubleSpinBox *temperature_ = nullptr, *topP_ = nullptr;
  QSpinBox *seed_ = nullptr, *maxNew_ = nullptr;
  QCheckBox* ignoreEos_ = nullptr;
  QComboBox* normalizer_ = nullptr;
  QSpinBox* registers_ = nullptr;
  QCheckBox *adapter_ = nullptr, *diff_ = nullptr;
  QLabel *summary_ = nullptr, *promptNote_ = nullptr;
  bool adapterAvailable_ = false;
};

}  // namespace hl::app
