// The main window's checkpoint side (see main_window.h): opening a checkpoint by dialog, recent
// list, demo menu, drag and drop or command line; the load on the engine thread with progress and
// Cancel; adapters and fine-tuned checkpoints for the DoRA view; error reporting. A failed load
// leaves the previous model and its run untouched (the engine swaps only on success).
#include <QActionGroup>
#include <QDir>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QMenu>
#include <QMimeData>
#include <QProgressBar>
#include <QPushButton>
#include <QSettings>
#include <QStatusBar>
#include <utility>

#include "app/app_settings.h"
#include "app/engine_thread.h"
#include "app/engine_worker.h"
#include "app/inspector_context.h"
#include "app/main_window.h"
#include "app/run_controller.h"
#include "app/run_panel.h"
#include "app/token_strip.h"
#include "sessions/session_file.h"
#include "sessions/sweep_file.h"
#include "views/view_util.h"

namespace hl::app {

void MainWindow::connectEngine() {
  EngineWorker* w = engine_->worker();
  connect(w, &EngineWorker::loadProgress, this, &MainWindow::onLoadProgress);
  connect(w, &EngineWorker::modelLoaded, this, &MainWindow::onModelLoaded);
  connect(w, &EngineWorker::loadFailed, this, &MainWindow::onLoadFailed);
  connect(w, &EngineWorker::hardwareMeasured, this, [this](double gbs) {
    hl::views::HardwareInfo hw = ctx_->hardware();
    hw.bandwidthGBs = gbs;
    ctx_->setHardware(hw);
  });
  connect(w, &EngineWorker::adapterLoaded, this, &MainWindow::onAdapterLoaded);
  connect(w, &EngineWorker::adapterFailed, this, [this](const QString& dir, const QString& message) {
    reportError(tr("Could not load the adapter"), tr("%1\n\n%2").arg(QDir::toNativeSeparators(dir), message));
    if (auto f = std::move(afterAdapter_)) {
      afterAdapter_ = nullptr;
      f();
    }
  });
  // Runs, steps, compare runs, resumes and hidden attention: the RunController's (connectController).
}

void MainWindow::reportError(const QString& title, const QString& message) {
  statusBar()->showMessage(title, 10000);
  emit errorReported(title, message);
  if (errorHook_) {
    errorHook_(title, message);
    return;
  }
  auto* box = new QMessageBox(QMessageBox::Critical, title, message, QMessageBox::Ok, this);
  box->setAttribute(Qt::WA_DeleteOnClose);
  box->setTextInteractionFlags(Qt::TextSelectableByMouse);
  box->open();  // not exec(): the GUI keeps running
}

bool MainWindow::openCheckpoint(const QString& dir) {
  if (isLoading()) {
    statusBar()->showMessage(tr("A checkpoint is still loading"), 5000);
    return false;
  }
  if (!keepRecordingOnLoad_ && !maybeDiscard()) return false;
  if (ctl_->engineBusy()) engine_->requestStop();  // a running Run-to-end would hold the load back
  ctl_->setLoading(true);
  ++loadRequest_;
  progress_->setRange(0, 0);
  progress_->setFormat(tr("loading %p%"));
  progress_->show();
  cancelButton_->show();
  statusBar()->showMessage(tr("Loading %1…").arg(QDir::toNativeSeparators(dir)));
  const int id = loadRequest_, epoch = engine_->cancelEpoch();
  engine_->post([id, epoch, dir, weights = weightsFormat_](EngineWorker& w) { w.loadModel(id, epoch, dir, weights); });
  updateActions();
  return true;
}

void MainWindow::setWeightsFormat(const QString& format) {
  if (format == weightsFormat_) return;
  weightsFormat_ = format;
  if (const ModelInfo* m = modelInfo(); m && m->weights != format) openCheckpoint(m->dir);  // the open model, in the new format
}

void MainWindow::cancelLoad() {
  if (!isLoading()) return;
  engine_->cancelLoad();
  statusBar()->showMessage(tr("Cancelling the load…"));
}

void MainWindow::onLoadProgress(int requestId, qint64 done, qint64 total, const QString& what) {
  if (requestId != loadRequest_ || !isLoading()) return;
  progress_->setRange(0, static_cast<int>(std::max<qint64>(1, total)));
  progress_->setValue(static_cast<int>(std::min(done, total)));
  if (!what.isEmpty()) statusBar()->showMessage(tr("Loading: %1").arg(what));
}

void MainWindow::onModelLoaded(const ModelInfo& info) {
  ctl_->setLoading(false);
  progress_->hide();
  cancelButton_->hide();
  ctl_->setModel(info);  // the adapter and the run's backend go with the old model
  ctx_->setDora({}, QStringLiteral("DoRA"));
  ctx_->setVocabulary(&modelInfo()->vocab);
  {
    hl::views::HardwareInfo hw = ctx_->hardware();
    hw.weightBytesPerToken = info.weightBytesPerToken;
    ctx_->setHardware(hw);
  }
  panel_->setTokenizerAvailable(info.hasTokenizer);
  panel_->setChatTemplate(info.chatTemplate, info.chatTokenizer, info.chatTemplateError);
  panel_->setAdapterAvailable(false);
  if (keepRecordingOnLoad_) ctl_->syncToggles();  // a session's runs, not an empty box (finding 4)
  addRecent(kRecentCheckpoints, info.dir);
  rebuildRecentMenus();
  backendMenu_->clear();
  auto* group = new QActionGroup(backendMenu_);
  QStringList names = {QStringLiteral("auto")};
  names += info.backends;
  for (const QString& n : names) {
    QAction* a = backendMenu_->addAction(backendMenuLabel(n), this, [this, n] { setBackend(n); });
    a->setCheckable(true);
    a->setChecked(n == backend_);
    group->addAction(a);
  }
  const hl::LayerSchedule& s = info.schedule;
  statusBar()->showMessage(tr("Loaded %1: %2 layers (%3 attention, %4 Mamba, %5 MoE), %6 M parameters, in %7 s")
                               .arg(info.name)
                               .arg(s.size())
                               .arg(s.num_attention())
                               .arg(s.num_ssm())
                               .arg(s.num_moe())
                               .arg(static_cast<double>(info.params) / 1e6, 0, 'f', 2)
                               .arg(info.loadSeconds, 0, 'f', 2) +
                               (info.quantSummary.isEmpty() ? QString() : "; " + info.quantSummary),
                           10000);
  if (ctx_->hardware().bandwidthGBs <= 0) engine_->post([](EngineWorker& w) { w.measureHardware(); });
  if (!keepRecordingOnLoad_) {
    // A new model: a fresh, empty recording; a run A starts from the prompt at once.
    // The model's schedule is drawn at once (ribbon, layer lists), before any step (finding 2).
    ctl_->newRecording();
    sessionPath_.clear();
    strip_->clear();
    defaultPrompt();
    ctl_->setAutoStarted(resetRun());
  }
  keepRecordingOnLoad_ = false;
  updateActions();
  emit modelLoaded(info.dir);
  if (auto f = std::move(afterLoad_)) {
    afterLoad_ = nullptr;
    f();
  }
}

void MainWindow::onLoadFailed(int requestId, const QString& dir, const QString& message, bool cancelled) {
  Q_UNUSED(requestId);
  ctl_->setLoading(false);
  progress_->hide();
  cancelButton_->hide();
  afterLoad_ = nullptr;
  const bool sessionWaiting = keepRecordingOnLoad_;
  keepRecordingOnLoad_ = false;
  if (!QFileInfo(dir).isDir()) removeRecent(kRecentCheckpoints, dir);
  rebuildRecentMenus();
  updateActions();
  if (cancelled) {
    statusBar()->showMessage(tr("Loading %1 cancelled").arg(QDir::toNativeSeparators(dir)), 8000);
  } else {
    QString kept =
        hasModel() ? tr("The model %1 is still loaded and usable.").arg(modelInfo()->name) : tr("No model is loaded.");
    if (sessionWaiting) kept = tr("The session stays open, view-only: every view scrubs and exports.");
    reportError(tr("Could not open checkpoint"),
                tr("%1\n\n%2\n\n%3").arg(QDir::toNativeSeparators(dir), message, kept));
  }
  emit loadFailed(message);
  if (sessionWaiting) emit sessionResumed(false);
}

void MainWindow::loadAdapter(const QString& dir) {
  if (!hasModel()) {
    reportError(tr("Could not load the adapter"), tr("Open the base checkpoint first."));
    return;
  }
  statusBar()->showMessage(tr("Loading adapter %1…").arg(QDir::toNativeSeparators(dir)));
  engine_->post([dir](EngineWorker& w) { w.loadAdapter(dir); });
}

void MainWindow::loadTunedCheckpoint(const QString& dir) {
  if (!hasModel()) {
    reportError(tr("Could not load the fine-tuned checkpoint"), tr("Open the base checkpoint first."));
    return;
  }
  statusBar()->showMessage(tr("Comparing %1 with the base…").arg(QDir::toNativeSeparators(dir)));
  engine_->post([dir](EngineWorker& w) { w.loadTuned(dir); });
}

void MainWindow::onAdapterLoaded(const AdapterInfo& info) {
  if (info.isAdapter) {
    ctl_->setAdapter(info);
    panel_->setAdapterAvailable(true);
    ctl_->syncToggles();  // a session whose run uses this adapter shows it ticked (finding 4)
  }
  ctx_->setDora(info.rows, info.label);
  statusBar()->showMessage(
      tr("%1 %2: %3 matrices compared with the base%4")
          .arg(info.label, QDir::toNativeSeparators(info.dir))
          .arg(info.rows.size())
          .arg(info.isAdapter ? tr("; the adapter toggle runs base + adapter as run B") : QString()),
      10000);
  emit adapterLoaded(info.dir);
  if (auto f = std::move(afterAdapter_)) {
    afterAdapter_ = nullptr;
    f();
  }
}

void MainWindow::chooseCheckpoint() {
  const QString start = hasModel() ? QFileInfo(modelInfo()->dir).absolutePath() : bundledModelsDir();
  const QString dir = QFileDialog::getExistingDirectory(this, tr("Open checkpoint folder"), start);
  if (!dir.isEmpty()) openCheckpoint(dir);
}

void MainWindow::chooseGguf() {
  const QString start = hasModel() ? QFileInfo(modelInfo()->dir).absolutePath() : bundledModelsDir();
  const QString file =
      QFileDialog::getOpenFileName(this, tr("Open GGUF model"), start, tr("GGUF models (*.gguf);;All files (*)"));
  if (!file.isEmpty()) openCheckpoint(file);
}

void MainWindow::chooseAdapter() {
  const QString dir =
      QFileDialog::getExistingDirectory(this, tr("Load PEFT adapter folder (adapter_config.json)"), bundledModelsDir());
  if (!dir.isEmpty()) loadAdapter(dir);
}

void MainWindow::chooseTuned() {
  const QString dir =
      QFileDialog::getExistingDirectory(this, tr("Fine-tuned checkpoint to compare with the base"), bundledModelsDir());
  if (!dir.isEmpty()) loadTunedCheckpoint(dir);
}

void MainWindow::setBackend(const QString& name) {
  backend_ = name;
  // An emulated device is a one-off choice: the next start goes back to auto.
  if (backendIsEmulated(name))
    QSettings().remove("engine/backend");
  else
    QSettings().setValue("engine/backend", name);
  statusBar()->showMessage(tr("Backend %1: used from the next Reset").arg(backendMenuLabel(name)), 8000);
  updateStatus();
}

void MainWindow::rebuildRecentMenus() {
  recentMenu_->clear();
  for (const QString& p : recentList(kRecentCheckpoints))
    recentMenu_->addAction(QDir::toNativeSeparators(p), this, [this, p] { openCheckpoint(p); });
  recentMenu_->setEnabled(!recentMenu_->isEmpty());
  recentSessionsMenu_->clear();
  for (const QString& p : recentList(kRecentSessions)) {
    QString label = QFileInfo(p).fileName();
    try {
      const hl::SessionSummary s = hl::read_session_summary(QFile::encodeName(p).toStdString());
      label += tr(" — %1, %2").arg(QString::fromStdString(s.checkpoint.name)).arg(hl::views::tokensText(s.n_tokens));
    } catch (const std::exception&) {
      label += tr(" (unreadable)");
    }
    QAction* a = recentSessionsMenu_->addAction(label, this, [this, p] { openSession(p); });
    a->setToolTip(p);
  }
  recentSessionsMenu_->setEnabled(!recentSessionsMenu_->isEmpty());
}

namespace {
// The first local path of a drag, classified: 'c' checkpoint (folder or GGUF file), 'a' adapter folder, 's' session,
// 't' sweep statistics.
QPair<QString, char> droppedPath(const QMimeData* m) {
  if (!m || !m->hasUrls()) return {};
  for (const QUrl& u : m->urls()) {
    if (!u.isLocalFile()) continue;
    const QString p = u.toLocalFile();
    const QFileInfo fi(p);
    if (fi.isDir() && QFileInfo::exists(p + "/adapter_config.json")) return {p, 'a'};
    if (fi.isDir() && QFileInfo::exists(p + "/config.json")) return {p, 'c'};
    if (fi.isFile() && p.endsWith(QLatin1String(hl::kSessionExtension))) return {p, 's'};
    if (fi.isFile() && p.endsWith(QLatin1String(hl::kStatsExtension))) return {p, 't'};
    if (fi.isFile() && fi.fileName() == QLatin1String("config.json")) return {fi.absolutePath(), 'c'};
    if (fi.isFile() && p.endsWith(QLatin1String(".gguf"), Qt::CaseInsensitive)) return {p, 'c'};
  }
  return {};
}
}  // namespace

void MainWindow::dragEnterEvent(QDragEnterEvent* e) {
  if (!droppedPath(e->mimeData()).first.isEmpty()) e->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* e) {
  const auto [path, kind] = droppedPath(e->mimeData());
  if (path.isEmpty()) return;
  e->acceptProposedAction();
  if (kind == 'a')
    loadAdapter(path);
  else if (kind == 'c')
    openCheckpoint(path);
  else if (kind == 't')
    openStats(path);
  else
    openSession(path);
}

}  // namespace hl::app
