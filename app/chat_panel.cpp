// ChatPanel (see chat_panel.h): a two-column table of turns (role combo box, content), buttons to
// add and remove turns, the "add generation prompt" box, and a read-only preview of the rendered
// template with "N tokens" and the tokens as pieces. Renders on every edit (templates are small);
// a template error shows in the status line instead of the text. Turns persist in QSettings.
#include "app/chat_panel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSettings>
#include <QTableWidget>
#include <QVBoxLayout>

#include "engine/core/error.h"
#include "engine/tokenizer/tokenizer.h"

namespace hl::app {

namespace {
const QStringList kRoles = {QStringLiteral("system"), QStringLiteral("user"), QStringLiteral("assistant")};
constexpr int kMaxShownTokens = 400;
}  // namespace

ChatPanel::ChatPanel(QWidget* parent) : QWidget(parent) {
  auto* box = new QVBoxLayout(this);
  box->setContentsMargins(0, 0, 0, 0);
  box->setSpacing(3);
  auto* top = new QHBoxLayout;
  table_ = new QTableWidget(0, 2, this);
  table_->setObjectName("chatTurns");
  table_->setHorizontalHeaderLabels({tr("role"), tr("content")});
  table_->horizontalHeader()->setSectionResizeMode(0, QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setSectionResizeMode(1, QHeaderView::Stretch);
  table_->verticalHeader()->setVisible(false);
  table_->setWordWrap(true);
  table_->setToolTip(tr("The conversation: double-click a content cell to edit it"));
  preview_ = new QPlainTextEdit(this);
  preview_->setObjectName("chatRendered");
  preview_->setReadOnly(true);
  preview_->setToolTip(tr("The chat template's output: the text the run feeds (no BOS added; the template writes it)"));
  top->addWidget(table_, 3);
  top->addWidget(preview_, 2);
  box->addLayout(top, 1);

  auto* row = new QHBoxLayout;
  add_ = new QPushButton(tr("Add turn"), this);
  add_->setObjectName("chatAddTurn");
  add_->setToolTip(tr("Append a turn (the role alternates user / assistant)"));
  remove_ = new QPushButton(tr("Remove turn"), this);
  remove_->setObjectName("chatRemoveTurn");
  remove_->setToolTip(tr("Remove the selected turn (the last one when none is selected)"));
  genPrompt_ = new QCheckBox(tr("add generation prompt"), this);
  genPrompt_->setObjectName("chatGenerationPrompt");
  genPrompt_->setChecked(true);
  genPrompt_->setToolTip(tr("End with the template's opening of an assistant turn, as apply_chat_template("
                            "add_generation_prompt=True)"));
  status_ = new QLabel(this);
  status_->setObjectName("chatStatus");
  status_->setTextFormat(Qt::PlainText);
  status_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  row->addWidget(add_);
  row->addWidget(remove_);
  row->addWidget(genPrompt_);
  row->addWidget(status_, 1);
  box->addLayout(row);

  connect(add_, &QPushButton::clicked, this, [this] {
    const int n = table_->rowCount();
    QString role = QStringLiteral("user");
    if (n > 0) {
      auto* last = qobject_cast<QComboBox*>(table_->cellWidget(n - 1, 0));
      if (last && last->currentText() == QLatin1String("user")) role = QStringLiteral("assistant");
    }
    addTurn(role, QString());
    table_->setCurrentCell(table_->rowCount() - 1, 1);
    render();
  });
  connect(remove_, &QPushButton::clicked, this, [this] {
    if (table_->rowCount() == 0) return;
    const int r = table_->currentRow() >= 0 ? table_->currentRow() : table_->rowCount() - 1;
    table_->removeRow(r);
    render();
  });
  connect(genPrompt_, &QCheckBox::toggled, this, [this] { render(); });
  connect(table_, &QTableWidget::itemChanged, this, [this] { render(); });
  setTurns({{QStringLiteral("system"), tr("You are a helpful assistant.")},
            {QStringLiteral("user"), tr("What does the Mamba layer keep from one token to the next?")}});
}

ChatPanel::~ChatPanel() = default;

void ChatPanel::addTurn(const QString& role, const QString& content) {
  const QSignalBlocker b(table_);
  const int r = table_->rowCount();
  table_->insertRow(r);
  auto* combo = new QComboBox(table_);
  combo->addItems(kRoles);
  combo->setCurrentIndex(std::max<int>(0, static_cast<int>(kRoles.indexOf(role))));
  if (!kRoles.contains(role)) combo->setCurrentText(role);
  connect(combo, &QComboBox::currentIndexChanged, this, [this] { render(); });
  table_->setCellWidget(r, 0, combo);
  table_->setItem(r, 1, new QTableWidgetItem(content));
}

QList<ChatPanel::Turn> ChatPanel::turns() const {
  QList<Turn> out;
  for (int r = 0; r < table_->rowCount(); ++r) {
    auto* combo = qobject_cast<QComboBox*>(table_->cellWidget(r, 0));
    const QTableWidgetItem* item = table_->item(r, 1);
    out.push_back({combo ? combo->currentText() : QStringLiteral("user"), item ? item->text() : QString()});
  }
  return out;
}

void ChatPanel::setTurns(const QList<Turn>& turns) {
  {
    const QSignalBlocker b(table_);
    table_->setRowCount(0);
    for (const Turn& t : turns) addTurn(t.role, t.content);
  }
  render();
}

bool ChatPanel::addGenerationPrompt() const {
  return genPrompt_->isChecked();
}
void ChatPanel::setAddGenerationPrompt(bool on) {
  genPrompt_->setChecked(on);
}

void ChatPanel::setTemplate(const std::optional<hl::ChatTemplateSource>& tpl, std::shared_ptr<const hl::Tokenizer> tok) {
  tpl_ = tpl;
  tok_ = std::move(tok);
  render();
}

void ChatPanel::render() {
  rendered_.clear();
  error_.clear();
  tokens_.clear();
  if (!tpl_) {
    error_ = tr("This checkpoint has no chat template");
  } else {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    for (const Turn& t : turns())
      messages.push_back({{"role", t.role.toStdString()}, {"content", t.content.toStdString()}});
    try {
      rendered_ = QString::fromStdString(hl::apply_chat_template(*tpl_, messages, genPrompt_->isChecked()));
      if (tok_) tokens_ = tok_->encode(rendered_.toStdString());
    } catch (const hl::Error& e) {
      rendered_.clear();
      error_ = QString::fromUtf8(e.what());
    }
  }
  preview_->setPlainText(rendered_);
  if (!error_.isEmpty()) {
    status_->setText(error_);
  } else if (!tok_) {
    status_->setText(tr("%n characters (no tokenizer: tokens unknown)", "", static_cast<int>(rendered_.size())));
  } else {
    QStringList pieces;
    for (size_t k = 0; k < tokens_.size() && k < kMaxShownTokens; ++k)
      pieces << QString::fromStdString(tok_->piece(tokens_[k]));
    status_->setText(tr("%n tokens: ", "", tokenCount()) + pieces.join(QStringLiteral(" | ")));
  }
  status_->setToolTip(status_->text());
  emit renderedChanged();
}

void ChatPanel::saveSettings(QSettings& s) const {
  s.beginGroup(QStringLiteral("chat"));
  QStringList roles, contents;
  for (const Turn& t : turns()) {
    roles << t.role;
    contents << t.content;
  }
  s.setValue("roles", roles);
  s.setValue("contents", contents);
  s.setValue("addGenerationPrompt", genPrompt_->isChecked());
  s.endGroup();
}

void ChatPanel::restoreSettings(QSettings& s) {
  s.beginGroup(QStringLiteral("chat"));
  const QStringList roles = s.value("roles").toStringList(), contents = s.value("contents").toStringList();
  if (!roles.isEmpty() && roles.size() == contents.size()) {
    QList<Turn> t;
    for (int k = 0; k < roles.size(); ++k) t.push_back({roles[k], contents[k]});
    setTurns(t);
  }
  genPrompt_->setChecked(s.value("addGenerationPrompt", true).toBool());
  s.endGroup();
}

}  // namespace hl::app
