// The main window (see main_window.h): menus, status bar, and the layer ribbon of the loaded
// checkpoint as a table — which layers are attention or Mamba, dense MLP or MoE (DL0171 Figure 1).
// The checkpoint loads on a worker thread; results come back to the GUI thread as a queued call.
#include "app/main_window.h"

#include <QColor>
#include <QFile>
#include <QFileDialog>
#include <QHeaderView>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QStatusBar>
#include <QThread>
#include <QTreeWidget>
#include <QVBoxLayout>
#include <exception>

#include "engine/model/loader.h"
#include "engine/model/weights.h"

namespace hl::app {

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle(tr("HybridLens"));
  resize(960, 640);
  createMenus();

  auto* central = new QWidget(this);
  auto* layout = new QVBoxLayout(central);
  summary_ = new QLabel(central);
  summary_->setObjectName("summary");
  summary_->setWordWrap(true);
  summary_->setTextFormat(Qt::PlainText);
  summary_->setText(
      tr("No checkpoint loaded. Use File > Open checkpoint… (Ctrl+O) to open a Jamba checkpoint folder."));
  ribbon_ = new QTreeWidget(central);
  ribbon_->setObjectName("layerRibbon");
  ribbon_->setRootIsDecorated(false);
  ribbon_->setUniformRowHeights(true);
  ribbon_->setAlternatingRowColors(false);
  ribbon_->setHeaderLabels({tr("Layer"), tr("Mixer"), tr("Feed-forward"), tr("Details")});
  ribbon_->header()->setStretchLastSection(true);
  layout->addWidget(summary_);
  layout->addWidget(ribbon_, 1);
  setCentralWidget(central);

  statusBar()->showMessage(tr("Ready"));
}

MainWindow::~MainWindow() {
  // The loader holds no pointer to this window, but a run-away thread must not outlive the app.
  if (loader_ && loader_->isRunning()) loader_->wait();
}

void MainWindow::createMenus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  QAction* open = file->addAction(tr("&Open checkpoint…"), this, &MainWindow::chooseCheckpoint);
  open->setShortcut(QKeySequence::Open);
  open->setObjectName("actionOpen");
  file->addSeparator();
  QAction* quit = file->addAction(tr("&Quit"), this, &QWidget::close);
  quit->setShortcut(QKeySequence::Quit);
  quit->setObjectName("actionQuit");

  QMenu* help = menuBar()->addMenu(tr("&Help"));
  QAction* about = help->addAction(tr("&About HybridLens"), this, &MainWindow::showAbout);
  about->setObjectName("actionAbout");
}

void MainWindow::chooseCheckpoint() {
  const QString dir = QFileDialog::getExistingDirectory(this, tr("Open checkpoint folder"));
  if (!dir.isEmpty() && !openCheckpoint(dir)) statusBar()->showMessage(tr("A checkpoint is still loading"), 5000);
}

void MainWindow::showAbout() {
  QMessageBox::about(this, tr("About HybridLens"),
                     tr("<b>HybridLens %1</b><p>Runs Jamba hybrid (Mamba + attention + MoE) language models "
                        "and shows instruments inside them.</p><p>Licensed under the GNU GPL, version 3 or "
                        "later. Plots use QCustomPlot (GPL-3.0).</p>")
                         .arg(QStringLiteral(HL_VERSION)));
}

bool MainWindow::openCheckpoint(const QString& dir) {
  if (isLoading()) return false;
  struct Result {
    std::shared_ptr<const hl::Model> model;
    QString error;
  };
  auto result = std::make_shared<Result>();
  const std::string path = QFile::encodeName(dir).toStdString();
  QThread* thread = QThread::create([result, path] {
    try {
      result->model = hl::load_model(path);
    } catch (const std::exception& e) {
      result->error = QString::fromUtf8(e.what());
    } catch (...) {
      result->error = QStringLiteral("unexpected error while loading");
    }
  });
  loader_ = thread;
  connect(thread, &QThread::finished, thread, &QObject::deleteLater);
  connect(thread, &QThread::finished, this, [this, dir, result] {
    loader_ = nullptr;
    finishLoad(dir, result->model, result->error);
  });
  statusBar()->showMessage(tr("Loading %1…").arg(dir));
  thread->start();
  return true;
}

void MainWindow::finishLoad(const QString& dir, std::shared_ptr<const hl::Model> model, const QString& error) {
  if (!model) {
    // The previous model, if any, stays loaded and shown.
    statusBar()->showMessage(tr("Could not open %1").arg(dir));
    auto* box = new QMessageBox(QMessageBox::Critical, tr("Could not open checkpoint"), error, QMessageBox::Ok, this);
    box->setAttribute(Qt::WA_DeleteOnClose);
    box->open();  // not exec(): the GUI thread never blocks
    emit loadFailed(error);
    return;
  }
  model_ = std::move(model);
  showModel();
  statusBar()->showMessage(tr("Loaded %1").arg(dir));
  emit modelLoaded(dir);
}

void MainWindow::showModel() {
  const hl::JambaConfig& c = model_->config;
  const QString name = QString::fromStdString(model_->name);
  setWindowTitle(tr("%1 — HybridLens").arg(name));
  summary_->setText(tr("%1: %2 layers (%3 attention, %4 Mamba; %5 MoE), %6 M parameters (%7 M active per "
                       "token), hidden %8, vocabulary %9")
                        .arg(name)
                        .arg(c.num_hidden_layers)
                        .arg(c.num_attention_layers())
                        .arg(c.num_mamba_layers())
                        .arg(c.num_moe_layers())
                        .arg(static_cast<double>(model_->param_count()) / 1e6, 0, 'f', 2)
                        .arg(static_cast<double>(model_->active_param_count()) / 1e6, 0, 'f', 2)
                        .arg(c.hidden_size)
                        .arg(c.vocab_size));

  ribbon_->clear();
  const QColor attentionTint(255, 196, 140, 90), mambaTint(140, 190, 255, 70);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const bool attn = c.is_attention_layer(i), moe = c.is_moe_layer(i);
    QString details;
    if (attn) {
      const bool sinks = i < static_cast<int64_t>(model_->w.layers.size()) && !model_->w.layers[i].attn.sinks.empty();
      details = tr("%1 heads, %2 KV heads, head dim %3, normalizer %4")
                    .arg(c.num_attention_heads)
                    .arg(c.num_key_value_heads)
                    .arg(c.head_dim())
                    .arg(sinks ? QStringLiteral("sink") : QString::fromLatin1(normalizer_name(c.attention_normalizer)));
    } else {
      details = tr("inner %1, state %2, conv %3, dt rank %4")
                    .arg(c.mamba_inner())
                    .arg(c.mamba_d_state)
                    .arg(c.mamba_d_conv)
                    .arg(c.mamba_dt_rank);
    }
    if (moe) details += tr("; %1 experts, top-%2").arg(c.num_experts).arg(c.num_experts_per_tok);
    auto* item = new QTreeWidgetItem(ribbon_, {QString::number(i), attn ? tr("attention") : tr("Mamba"),
                                               moe ? tr("MoE") : tr("dense MLP"), details});
    for (int col = 0; col < 2; ++col) item->setBackground(col, attn ? attentionTint : mambaTint);
  }
  for (int col = 0; col < 3; ++col) ribbon_->resizeColumnToContents(col);
}

}  // namespace hl::app
