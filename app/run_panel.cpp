// RunPanel (see run_panel.h): a compact four-row form — prompt, stepping, sampling, toggles —
// whose values persist in QSettings. Shortcuts live on the main window's actions; the buttons
// name them in their tooltips.
#include "app/run_panel.h"

#include "app/chat_panel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>
#include <QStandardItemModel>

namespace hl::app {

namespace {
QLabel* caption(const QString& t, QWidget* parent) {
  auto* l = new QLabel(t, parent);
  l->setAlignment(Qt::AlignRight | Qt::AlignVCenter);
  return l;
}
}  // namespace

RunPanel::RunPanel(QWidget* parent) : QWidget(parent) {
  auto* grid = new QGridLayout(this);
  grid->setContentsMargins(6, 4, 6, 2);
  grid->setHorizontalSpacing(6);
  grid->setVerticalSpacing(4);

  // Row 0: the prompt.
  prompt_ = new QPlainTextEdit(this);
  prompt_->setObjectName("promptEdit");
  prompt_->setPlaceholderText(tr("Prompt text, or token ids such as 1, 5, 9 (choose Token ids)"));
  prompt_->setTabChangesFocus(true);
  prompt_->setFixedHeight(prompt_->fontMetrics().lineSpacing() * 2 + 14);
  mode_ = new QComboBox(this);
  mode_->setObjectName("promptMode");
  mode_->addItems({tr("Text"), tr("Token ids"), tr("Chat")});
  mode_->setToolTip(tr("Text is tokenized with the checkpoint's tokenizer.model; token ids are fed as typed"));
  bos_ = new QCheckBox(tr("BOS"), this);
  bos_->setChecked(true);
  bos_->setToolTip(tr("Prepend bos_token_id to a text prompt"));
  grid->addWidget(caption(tr("Prompt"), this), 0, 0);
  grid->addWidget(prompt_, 0, 1, 1, 10);
  chat_ = new ChatPanel(this);  // Chat mode: shown in the prompt's place
  chat_->setObjectName("chatPanel");
  chat_->hide();
  grid->addWidget(chat_, 0, 1, 1, 10);
  auto* modeBox = new QVBoxLayout;
  modeBox->addWidget(mode_);
  modeBox->addWidget(bos_);
  promptNote_ = new QLabel(this);
  promptNote_->setObjectName("promptNote");
  promptNote_->setWordWrap(true);
  promptNote_->setStyleSheet(QStringLiteral("color: #c0392b; font-weight: bold"));
  promptNote_->hide();
  grid->addWidget(promptNote_, 3, 1, 1, 11);
  grid->addLayout(modeBox, 0, 11);

  // Row 1: stepping and sampling.
  auto* buttons = new QHBoxLayout;
  auto button = [&](const QString& text, const QString& name, const QString& tip) {
    auto* b = new QPushButton(text, this);
    b->setObjectName(name);
    b->setToolTip(tip);
    buttons->addWidget(b);
    return b;
  };
  reset_ =
      button(tr("Reset"), "resetButton", tr("Start a new run A from the prompt with the current toggles (Ctrl+R)"));
  step_ = button(tr("Step"), "stepButton", tr("Feed or generate one token (F10, Ctrl+Right)"));
  runN_ = button(tr("Run N"), "runNButton", tr("Step N tokens, stopping at an end-of-sequence token (F8)"));
  n_ = new QSpinBox(this);
  n_->setObjectName("runCount");
  n_->setRange(1, 1 << 20);
  n_->setValue(8);
  n_->setToolTip(tr("N of Run N"));
  buttons->addWidget(n_);
  runEnd_ = button(tr("Run to end"), "runEndButton",
                   tr("Feed the prompt and generate until an end-of-sequence token or the "
                      "maximum of new tokens (F5)"));
  stop_ = button(tr("Stop"), "stopButton", tr("Stop after the current token (Esc, Shift+F5)"));
  buttons->addStretch(1);
  grid->addWidget(caption(tr("Run"), this), 1, 0);
  grid->addLayout(buttons, 1, 1, 1, 11);

  temperature_ = new QDoubleSpinBox(this);
  temperature_->setObjectName("temperature");
  temperature_->setRange(0, 10);
  temperature_->setSingleStep(0.1);
  temperature_->setDecimals(2);
  temperature_->setSpecialValueText(tr("greedy"));
  temperature_->setToolTip(tr("Sampling temperature; 0 is greedy (argmax)"));
  topP_ = new QDoubleSpinBox(this);
  topP_->setObjectName("topP");
  topP_->setRange(0.01, 1);
  topP_->setSingleStep(0.05);
  topP_->setValue(1);
  topP_->setToolTip(tr("Nucleus sampling: keep the smallest set of tokens whose probability reaches top-p"));
  seed_ = new QSpinBox(this);
  seed_->setObjectName("seed");
  seed_->setRange(0, 2147483647);
  seed_->setToolTip(tr("Random seed of the sampler (sampling is reproducible)"));
  maxNew_ = new QSpinBox(this);
  maxNew_->setObjectName("maxNewTokens");
  maxNew_->setRange(1, kMaxNewTokens);
  maxNew_->setValue(64);
  maxNew_->setToolTip(tr("Run to end stops after this many generated tokens"));
  ignoreEos_ = new QCheckBox(tr("ignore EOS"), this);
  ignoreEos_->setObjectName("ignoreEos");
  ignoreEos_->setToolTip(tr("Keep generating after an end-of-sequence token"));
  // Sampling on a row of its own: the panel stays narrow enough for a 1280-pixel laptop screen
  // with the ribbon and candidates docked beside it.
  auto* sampling = new QHBoxLayout;
  sampling->addWidget(new QLabel(tr("temperature"), this));
  sampling->addWidget(temperature_);
  sampling->addWidget(new QLabel(tr("top-p"), this));
  sampling->addWidget(topP_);
  sampling->addWidget(new QLabel(tr("seed"), this));
  sampling->addWidget(seed_);
  sampling->addWidget(new QLabel(tr("max new"), this));
  sampling->addWidget(maxNew_);
  sampling->addWidget(ignoreEos_);
  sampling->addStretch(1);
  grid->addWidget(caption(tr("Sampling"), this), 2, 0);
  grid->addLayout(sampling, 2, 1, 1, 11);

  // Row 2: toggles. Settings that differ from run A's re-run the same tokens as run B.
  normalizer_ = new QComboBox(this);
  normalizer_->setObjectName("normalizer");
  normalizer_->addItems({tr("as trained"), tr("softmax"), tr("softmax-1"), tr("sink")});
  normalizer_->setToolTip(
      tr("Attention normalizer of every attention layer: softmax, softmax-1 (a null key: Miller 2023) or a "
         "learned sink logit (Xiao et al. 2023). A change re-runs the same tokens as run B"));
  registers_ = new QSpinBox(this);
  registers_->setObjectName("registers");
  registers_->setRange(-1, 4096);
  registers_->setValue(-1);
  registers_->setSpecialValueText(tr("trained"));
  registers_->setToolTip(
      tr("Register tokens before the prompt (Darcet et al. 2023): -1 is the trained count. A change re-runs the "
         "same tokens as run B"));
  adapter_ = new QCheckBox(tr("adapter"), this);
  adapter_->setObjectName("adapterToggle");
  adapter_->setToolTip(
      tr("Base + the loaded LoRA/DoRA adapter merged (File > Load adapter…). A change re-runs the "
         "same tokens as run B"));
  diff_ = new QCheckBox(tr("show B − A"), this);
  diff_->setObjectName("showDiff");
  diff_->setToolTip(tr("Views draw B − A instead of overlaying A (solid) and B (dashed) (D)"));
  auto* toggles = new QHBoxLayout;
  toggles->addWidget(new QLabel(tr("normalizer"), this));
  toggles->addWidget(normalizer_);
  toggles->addWidget(new QLabel(tr("registers"), this));
  toggles->addWidget(registers_);
  toggles->addWidget(adapter_);
  toggles->addWidget(diff_);
  toggles->addStretch(1);
  grid->addWidget(caption(tr("Toggles"), this), 3, 0);
  grid->addLayout(toggles, 3, 1, 1, 4);
  summary_ = new QLabel(this);
  summary_->setObjectName("runSummary");
  summary_->setTextFormat(Qt::PlainText);
  summary_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  grid->addWidget(summary_, 3, 5, 1, 7);
  grid->setColumnStretch(4, 1);

  connect(reset_, &QPushButton::clicked, this, &RunPanel::resetRequested);
  connect(step_, &QPushButton::clicked, this, [this] { emit stepRequested(1); });
  connect(runN_, &QPushButton::clicked, this, [this] { emit stepRequested(n_->value()); });
  connect(runEnd_, &QPushButton::clicked, this, [this] { emit stepRequested(-1); });
  connect(stop_, &QPushButton::clicked, this, &RunPanel::stopRequested);
  connect(normalizer_, &QComboBox::currentIndexChanged, this, &RunPanel::togglesChanged);
  connect(registers_, &QSpinBox::valueChanged, this, &RunPanel::togglesChanged);
  connect(adapter_, &QCheckBox::toggled, this, &RunPanel::togglesChanged);
  connect(diff_, &QCheckBox::toggled, this, &RunPanel::showDiffChanged);
  connect(mode_, &QComboBox::currentIndexChanged, this, [this](int i) {
    bos_->setEnabled(i == 0);
    prompt_->setVisible(i != 2);
    chat_->setVisible(i == 2);
    wantChat_ = i == 2;
  });
  setChatTemplate(std::nullopt, nullptr);
  connect(prompt_, &QPlainTextEdit::textChanged, this, &RunPanel::promptEdited);
  connect(mode_, &QComboBox::currentIndexChanged, this, &RunPanel::promptEdited);
  connect(bos_, &QCheckBox::toggled, this, &RunPanel::promptEdited);
  setState(false, false, false, false);
}

QString RunPanel::promptText() const {
  return chatMode() ? chat_->renderedText() : prompt_->toPlainText();
}
void RunPanel::setPromptText(const QString& t) {
  prompt_->setPlainText(t);
}
bool RunPanel::idsMode() const {
  return mode_->currentIndex() == 1;
}
void RunPanel::setIdsMode(bool ids) {
  if (ids) mode_->setCurrentIndex(1);
  else if (mode_->currentIndex() == 1) mode_->setCurrentIndex(0);
}
bool RunPanel::chatMode() const {
  return mode_->currentIndex() == 2;
}
bool RunPanel::addBos() const {
  return bos_->isChecked() && !chatMode();
}

void RunPanel::setChatTemplate(const std::optional<hl::ChatTemplateSource>& tpl, std::shared_ptr<const hl::Tokenizer> tok,
                               const QString& loadError) {
  const bool want = wantChat_;
  const bool available = tpl.has_value() && tok != nullptr;
  chat_->setTemplate(tpl, tok);
  QString why;
  if (!loadError.isEmpty()) why = tr("Chat is off: %1").arg(loadError);
  else if (!tpl) why = tr("This checkpoint has no chat template (chat_template in tokenizer_config.json, "
                          "chat_template.jinja, chat_template.json, or tokenizer.chat_template in a GGUF file)");
  else if (!tok) why = tr("This checkpoint has no tokenizer to encode the rendered chat");
  else why = tr("Chat: turns rendered with the checkpoint's chat template (%1)").arg(QString::fromStdString(tpl->origin));
  if (auto* m = qobject_cast<QStandardItemModel*>(mode_->model())) {
    m->item(2)->setEnabled(available);
    m->item(2)->setToolTip(why);
  }
  if (!available && chatMode()) mode_->setCurrentIndex(tok ? 0 : 1);
  if (available && want) mode_->setCurrentIndex(2);
  wantChat_ = want;
}
int RunPanel::runCount() const {
  return n_->value();
}
int64_t RunPanel::maxNewTokens() const {
  return maxNew_->value();
}
bool RunPanel::showDiff() const {
  return diff_->isChecked();
}
void RunPanel::setShowDiff(bool on) {
  diff_->setChecked(on);
}

void RunPanel::setTokenizerAvailable(bool available) {
  if (!available) setIdsMode(true);
  if (auto* m = qobject_cast<QStandardItemModel*>(mode_->model())) m->item(0)->setEnabled(available);
  mode_->setToolTip(available
                        ? tr("Text is tokenized with the checkpoint's tokenizer.model; token ids are fed as typed")
                        : tr("This checkpoint has no tokenizer.model: type token ids"));
}

hl::SamplingOptions RunPanel::sampling() const {
  hl::SamplingOptions o;
  o.temperature = static_cast<float>(temperature_->value());
  o.top_p = static_cast<float>(topP_->value());
  o.seed = static_cast<uint64_t>(seed_->value());
  o.ignore_eos = ignoreEos_->isChecked();
  return o;
}

Toggles RunPanel::toggles() const {
  Toggles t;
  const int n = normalizer_->currentIndex();
  t.normalizerOverride = n > 0;
  t.normalizer = n == 2 ? hl::Normalizer::Softmax1 : (n == 3 ? hl::Normalizer::Sink : hl::Normalizer::Softmax);
  t.registers = registers_->value();
  t.adapter = adapter_->isChecked() && adapterAvailable_;
  return t;
}

void RunPanel::setToggles(const Toggles& t) {
  const QSignalBlocker b1(normalizer_), b2(registers_), b3(adapter_);
  int n = 0;
  if (t.normalizerOverride)
    n = t.normalizer == hl::Normalizer::Softmax1 ? 2 : (t.normalizer == hl::Normalizer::Sink ? 3 : 1);
  normalizer_->setCurrentIndex(n);
  registers_->setValue(t.registers);
  adapter_->setChecked(t.adapter);
}

void RunPanel::setAdapterAvailable(bool available) {
  adapterAvailable_ = available;
  adapter_->setEnabled(available && normalizer_->isEnabled());
  if (!available) {
    const QSignalBlocker b(adapter_);
    adapter_->setChecked(false);
  }
}

void RunPanel::setState(bool haveModel, bool busy, bool canStep, bool viewOnly) {
  const bool live = haveModel && !viewOnly;
  reset_->setEnabled(live && !busy);
  step_->setEnabled(canStep && !busy && !viewOnly);
  runN_->setEnabled(canStep && !busy && !viewOnly);
  runEnd_->setEnabled(canStep && !busy && !viewOnly);
  stop_->setEnabled(busy);
  prompt_->setReadOnly(viewOnly);
  for (QWidget* w : {static_cast<QWidget*>(normalizer_), static_cast<QWidget*>(registers_)}) w->setEnabled(live);
  adapter_->setEnabled(live && adapterAvailable_);
}

void RunPanel::setRunSummary(const QString& text) {
  summary_->setText(text);
  summary_->setToolTip(text);
}

void RunPanel::setPromptNote(const QString& note) {
  promptNote_->setText(note);
  promptNote_->setToolTip(note);
  promptNote_->setVisible(!note.isEmpty());
}

QString RunPanel::promptNote() const {
  return promptNote_->text();
}

void RunPanel::saveSettings(QSettings& s) const {
  s.beginGroup(QStringLiteral("run"));
  s.setValue("prompt", prompt_->toPlainText());
  s.setValue("idsMode", idsMode());
  s.setValue("chatMode", wantChat_);
  chat_->saveSettings(s);
  s.setValue("bos", addBos());
  s.setValue("runCount", n_->value());
  s.setValue("temperature", temperature_->value());
  s.setValue("topP", topP_->value());
  s.setValue("seed", seed_->value());
  s.setValue("maxNew", maxNew_->value());
  s.setValue("ignoreEos", ignoreEos_->isChecked());
  s.setValue("showDiff", diff_->isChecked());
  s.endGroup();
}

QStringList RunPanel::restoreSettings(QSettings& s) {
  QStringList notes;
  s.beginGroup(QStringLiteral("run"));
  if (s.contains("prompt")) {
    QString p = s.value("prompt").toString();
    if (p.size() > 100000) {  // a prompt this long is a damaged settings file, not something typed
      notes << tr("the remembered prompt (%1 characters) is longer than 100000: cleared").arg(p.size());
      p.clear();
    }
    setPromptText(p);
  }
  setIdsMode(s.value("idsMode", false).toBool());
  chat_->restoreSettings(s);
  wantChat_ = s.value("chatMode", false).toBool();
  if (wantChat_ && chat_->hasTemplate()) mode_->setCurrentIndex(2);
  bos_->setChecked(s.value("bos", true).toBool());
  // Each number within its box's range, else its default (a spin box would clamp silently).
  auto number = [&](QSpinBox* box, const char* key, int def) {
    bool ok = false;
    const qlonglong v = s.value(key, def).toLongLong(&ok);
    if (!ok || v < box->minimum() || v > box->maximum()) {
      notes << tr("%1 %2 is outside [%3, %4]: %5")
                   .arg(QString::fromLatin1(key), s.value(key).toString())
                   .arg(box->minimum())
                   .arg(box->maximum())
                   .arg(def);
      box->setValue(def);
      return;
    }
    box->setValue(static_cast<int>(v));
  };
  number(n_, "runCount", 8);
  temperature_->setValue(s.value("temperature", 0.0).toDouble());
  topP_->setValue(s.value("topP", 1.0).toDouble());
  seed_->setValue(s.value("seed", 0).toInt());
  number(maxNew_, "maxNew", 64);
  ignoreEos_->setChecked(s.value("ignoreEos", false).toBool());
  diff_->setChecked(s.value("showDiff", false).toBool());
  s.endGroup();
  return notes;
}

}  // namespace hl::app
