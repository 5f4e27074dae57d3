// The main window's session side (issue 6 items 2, 4, 5; see main_window.h): Save / Save As /
// Open / recent sessions in the background (SessionIo), reopening view-only and continuing to step
// once the recorded checkpoint is loaded and identical, autosave while stepping with recovery after
// a crash, the unsaved-work question, and comparing with a second session, token-aligned.
#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QStatusBar>
#include <QTimer>

#include "app/app_settings.h"
#include "app/autosave_store.h"
#include "app/inspector_context.h"
#include "app/main_window.h"
#include "app/run_controller.h"
#include "app/run_panel.h"
#include "app/session_io.h"
#include "app/token_strip.h"
#include "engine/model/layer_schedule.h"
#include "sessions/identity.h"
#include "sessions/session_file.h"
#include "views/view_util.h"

namespace hl::app {

namespace {

QString withExtension(const QString& path) {
  return path.endsWith(QLatin1String(hl::kSessionExtension)) ? path : path + QLatin1String(hl::kSessionExtension);
}

// Same layer schedule (kinds per layer) and sizes: the records of one can be drawn against the other's.
bool sameShape(const hl::JambaConfig& a, const hl::JambaConfig& b) {
  const hl::LayerSchedule sa = hl::LayerSchedule::from_config(a), sb = hl::LayerSchedule::from_config(b);
  return a.vocab_size == b.vocab_size && a.hidden_size == b.hidden_size && sa.mixers() == sb.mixers() &&
         sa.ffns() == sb.ffns() && a.num_attention_heads == b.num_attention_heads &&
         a.num_key_value_heads == b.num_key_value_heads && a.num_experts == b.num_experts &&
         a.num_experts_per_tok == b.num_experts_per_tok && a.mamba_d_state == b.mamba_d_state &&
         a.mamba_expand == b.mamba_expand && a.mamba_d_conv == b.mamba_d_conv;
}

QString idsText(const std::vector<int32_t>& ids, int64_t n) {
  QStringList l;
  for (int64_t i = 0; i < n && i < static_cast<int64_t>(ids.size()); ++i) l << QString::number(ids[i]);
  return l.join(QStringLiteral(", "));
}
}  // namespace

std::shared_ptr<const hl::Recording> MainWindow::snapshot() const {
  return ctx_->snapshot();  // shares the records: T pointers per run are copied, not the rows
}

bool MainWindow::saveSession(const QString& path) {
  if (!rec() || rec()->runs.empty()) {
    reportError(tr("Nothing to save"), tr("Start a run first: the session holds the runs' tokens and records."));
    return false;
  }
  const QString p = withExtension(path);
  const uint64_t at = ctl_->changes();
  statusBar()->showMessage(tr("Saving %1…").arg(QDir::toNativeSeparators(p)));
  io_->save(p, snapshot(), [this, p, at](const QString& error) {
    if (!error.isEmpty()) {
      reportError(tr("Could not save the session"),
                  tr("%1\n\n%2\n\nThe previous file, if any, is intact.").arg(p, error));
      return;
    }
    sessionPath_ = p;
    ctl_->markSaved(at);
    addRecent(kRecentSessions, p);
    rebuildRecentMenus();
    if (!isDirty()) clearAutosave();
    updateActions();
    statusBar()->showMessage(
        tr("Saved %1 (%2 MB)").arg(QDir::toNativeSeparators(p)).arg(QFileInfo(p).size() / 1e6, 0, 'f', 2), 8000);
    emit sessionSaved(p);
  });
  return true;
}

void MainWindow::saveCurrent() {
  if (sessionPath_.isEmpty())
    saveSessionAs();
  else
    saveSession(sessionPath_);
}

void MainWindow::saveSessionAs() {
  const QString start = sessionPath_.isEmpty() ? QDir::homePath() + "/untitled.hlsession" : sessionPath_;
  const QString p =
      QFileDialog::getSaveFileName(this, tr("Save session"), start, tr("HybridLens sessions (*.hlsession)"));
  if (!p.isEmpty()) saveSession(p);
}

void MainWindow::chooseSession() {
  const QString p = QFileDialog::getOpenFileName(this, tr("Open session"), QFileInfo(sessionPath_).absolutePath(),
                                                 tr("HybridLens sessions (*.hlsession);;All files (*)"));
  if (!p.isEmpty()) openSession(p);
}

void MainWindow::chooseCompareSession() {
  const QString p =
      QFileDialog::getOpenFileName(this, tr("Compare with session"), QFileInfo(sessionPath_).absolutePath(),
                                   tr("HybridLens sessions (*.hlsession);;All files (*)"));
  if (!p.isEmpty()) compareWithSession(p);
}

bool MainWindow::openSession(const QString& path) {
  if (!maybeDiscard()) return false;
  statusBar()->showMessage(tr("Opening %1…").arg(QDir::toNativeSeparators(path)));
  io_->load(path, [this, path](std::shared_ptr<hl::Recording> rec, const QString& error) {
    if (!rec) {
      if (!QFileInfo::exists(path)) removeRecent(kRecentSessions, path);
      rebuildRecentMenus();
      reportError(tr("Could not open the session"), tr("%1\n\n%2\n\nThe current work is unchanged.").arg(path, error));
      return;
    }
    applySession(std::move(rec), path, false);
  });
  return true;
}

void MainWindow::applySession(std::shared_ptr<hl::Recording> loaded, const QString& path, bool recovered) {
  if (loaded->runs.empty()) {
    reportError(tr("Could not open the session"), tr("%1\n\nThe session holds no run.").arg(path));
    return;
  }
  ctl_->openStored(std::move(loaded), recovered);  // view-only until resumed
  sessionPath_ = recovered ? QString() : path;
  const hl::Run& a = rec()->runs[0];
  if (!rec()->prompt.empty()) {
    panel_->setIdsMode(false);
    panel_->setPromptText(QString::fromStdString(rec()->prompt));
  } else {
    panel_->setIdsMode(true);
    panel_->setPromptText(idsText(rec()->tokens, a.prompt_tokens));
  }
  ctl_->setRunPrompt(promptKey());
  ctl_->syncToggles();  // the toggles show the recording's compared run (finding 4)
  setStripFromRecording();
  updateActions();
  if (!recovered) {
    addRecent(kRecentSessions, path);
    rebuildRecentMenus();
  }
  emit sessionOpened(path);

  // With its checkpoint at hand (the same config and weights), stepping continues.
  const QString folder = QString::fromStdString(rec()->checkpoint.folder);
  if (hasModel() && hl::identity_mismatch(rec()->checkpoint, modelInfo()->identity).empty()) {
    resumeSession();
    return;
  }
  if (!folder.isEmpty() && QFileInfo::exists(folder + "/config.json")) {
    keepRecordingOnLoad_ = true;
    if (openCheckpoint(folder)) {
      afterLoad_ = [this] {
        const std::string why = hl::identity_mismatch(rec()->checkpoint, modelInfo()->identity);
        if (why.empty()) {
          resumeSession();
          return;
        }
        statusBar()->showMessage(tr("View-only: %1").arg(QString::fromStdString(why)));
        emit sessionResumed(false);
      };
      return;
    }
    keepRecordingOnLoad_ = false;
  }
  statusBar()->showMessage(tr("View-only: the checkpoint %1 is not here. Every view scrubs and exports.")
                               .arg(QDir::toNativeSeparators(folder)));
  emit sessionResumed(false);
}

void MainWindow::resumeSession(bool adapterTried) {
  if (!rec() || rec()->runs.empty()) return;
  const hl::Run& a = rec()->runs[0];
  // The compare run the views show steps along with A; the other runs stay as stored.
  const int k = ctx_->compareIndex();
  const bool hasB = k >= 1 && k < static_cast<int>(rec()->runs.size());
  for (const hl::Run* r : {&a, hasB ? static_cast<const hl::Run*>(&rec()->runs[k]) : nullptr}) {
    if (!r || r->settings.adapter.empty()) continue;
    const QString dir = QFile::decodeName(QByteArray::fromStdString(r->settings.adapter));
    const AdapterInfo* at = ctl_->adapter();
    const bool loaded = at && QFile::encodeName(at->dir).toStdString() == r->settings.adapter;
    if (!loaded && !adapterTried && QFileInfo(dir).isDir()) {
      afterAdapter_ = [this] { resumeSession(true); };
      loadAdapter(dir);
      return;
    }
  }
  ctl_->resume(backend_);
}

// The controller resumed (or could not): the toggles already show the recording's runs.
void MainWindow::onResumed(const QString& error) {
  onPromptEdited();
  if (isViewOnly())
    statusBar()->showMessage(tr("View-only: %1").arg(error));
  else
    statusBar()->showMessage(tr("The session continues: Step adds tokens to its runs"), 8000);
  updateActions();
  emit sessionResumed(!isViewOnly());
}

bool MainWindow::compareWithSession(const QString& path) {
  if (!rec() || rec()->runs.empty()) {
    reportError(tr("Nothing to compare"), tr("Open a session or start a run first."));
    return false;
  }
  io_->load(path, [this, path](std::shared_ptr<hl::Recording> other, const QString& error) {
    if (!other) {
      reportError(tr("Could not open the session"), tr("%1\n\n%2").arg(path, error));
      return;
    }
    if (!rec() || rec()->runs.empty() || other->runs.empty() || !sameShape(rec()->config, other->config)) {
      reportError(tr("Cannot compare these sessions"),
                  tr("%1 was recorded with a model of another shape (layers, heads, experts or vocabulary), or "
                     "holds no run.")
                      .arg(path));
      return;
    }
    // Token-aligned: B covers the common prefix of token ids (or, with none, the common length).
    const size_t n = std::min(rec()->tokens.size(), other->tokens.size());
    size_t common = 0;
    while (common < n && rec()->tokens[common] == other->tokens[common]) ++common;
    auto run = std::make_unique<hl::Run>(other->runs[0]);
    const size_t keep = std::min(common > 0 ? common : n, run->records.size());
    run->records.resize(keep);
    run->prompt_tokens = std::min<int64_t>(run->prompt_tokens, static_cast<int64_t>(keep));
    const QString name = QFileInfo(path).fileName();
    ctl_->compareWithStored(std::move(other), std::move(run), name);
    statusBar()->showMessage(common > 0 ? tr("Comparing with %1: %2 in common").arg(name).arg(hl::views::tokensText(static_cast<long long>(common)))
                                        : tr("Comparing with %1: the tokens differ from the first one, aligned by "
                                             "position over %2 tokens")
                                              .arg(name)
                                              .arg(keep));
    emit compareChanged();
  });
  return true;
}

void MainWindow::endSessionCompare() {
  if (!ctx_->hasComparedSession()) return;
  ctx_->clearComparedSession();
  markDifferences(0);
  updateActions();
  emit compareChanged();
}

bool MainWindow::maybeDiscard() {
  if (!isDirty() || !rec() || rec()->runs.empty()) return true;
  const hl::Run& a = rec()->runs[0];
  QMessageBox::StandardButton b;
  if (discardHook_) {
    b = discardHook_();
  } else {
    b = QMessageBox::warning(
        this, tr("Unsaved session"),
        tr("The current session (%1) has changes that are not saved.\nSave them first?").arg(hl::views::tokensText(static_cast<long long>(a.records.size()))),
        QMessageBox::Save | QMessageBox::Discard | QMessageBox::Cancel, QMessageBox::Save);
  }
  if (b == QMessageBox::Discard) return true;
  if (b != QMessageBox::Save) return false;
  QString p = sessionPath_;
  if (p.isEmpty()) {
    p = QFileDialog::getSaveFileName(this, tr("Save session"), QDir::homePath() + "/untitled.hlsession",
                                     tr("HybridLens sessions (*.hlsession)"));
    if (p.isEmpty()) return false;
    p = withExtension(p);
  }
  const QString error = SessionIo::saveNow(p, *rec());
  if (!error.isEmpty()) {
    reportError(tr("Could not save the session"), tr("%1\n\n%2").arg(p, error));
    return false;
  }
  sessionPath_ = p;
  ctl_->markSaved(ctl_->changes());
  addRecent(kRecentSessions, p);
  clearAutosave();
  return true;
}

void MainWindow::setAutosaveInterval(int ms) {
  autosaveTimer_->setInterval(ms);
  autosaveTimer_->start();
}

void MainWindow::autosaveTick() {
  if (autosaving_ || !rec() || rec()->runs.empty() || !isDirty() || ctl_->autosaved()) return;
  autosaveNow();
}

void MainWindow::autosaveNow() {
  if (autosaving_ || !autosave_ || !rec() || rec()->runs.empty()) return;
  autosaving_ = true;
  const uint64_t at = ctl_->changes();
  io_->save(QFile::decodeName(autosave_->path().c_str()), snapshot(), [this, at](const QString& error) {
    autosaving_ = false;
    if (error.isEmpty())
      ctl_->markAutosaved(at);
    else
      statusBar()->showMessage(tr("Autosave failed: %1").arg(error), 8000);
  });
}

// Only this instance's autosave: another running instance's is never touched (AutosaveStore).
void MainWindow::clearAutosave() {
  if (autosaving_) io_->waitAll();  // the file being written must not reappear after removal
  if (autosave_) autosave_->clear();
}

bool MainWindow::hasAutosave() const {
  return autosave_ && autosave_->exists();
}

bool MainWindow::hasRecovery() const {
  return autosave_ && !autosave_->orphans().empty();
}

bool MainWindow::recoverAutosave() {
  if (!autosave_) return false;
  // The newest orphan becomes this instance's autosave (moved under its lock), then opens from there.
  bool adopted = false;
  for (const AutosaveStore::Orphan& o : autosave_->orphans()) {
    if (autosaving_) io_->waitAll();  // this instance's own autosave is about to be replaced
    if ((adopted = autosave_->adopt(o.path))) break;
  }
  if (!adopted) return false;
  const QString path = QFile::decodeName(autosave_->path().c_str());
  io_->load(path, [this, path](std::shared_ptr<hl::Recording> rec, const QString& error) {
    if (!rec) {
      reportError(tr("Could not recover the session"), tr("%1\n\n%2").arg(path, error));
      clearAutosave();
      return;
    }
    applySession(std::move(rec), path, true);
    statusBar()->showMessage(tr("Recovered the autosaved session: save it to keep it (Ctrl+Shift+S)"), 10000);
  });
  return true;
}

void MainWindow::offerRecovery() {
  if (!autosave_) return;
  const std::vector<AutosaveStore::Orphan> orphans = autosave_->orphans();
  if (orphans.empty()) return;
  const std::string orphan = orphans.front().path;
  QString what;
  try {
    const hl::SessionSummary s = hl::read_session_summary(orphan);
    what = tr("%1 on %2").arg(hl::views::tokensText(s.n_tokens)).arg(QString::fromStdString(s.checkpoint.name));
  } catch (const std::exception& e) {
    what = QString::fromUtf8(e.what());
  }
  const QDateTime when = QFileInfo(QFile::decodeName(orphan.c_str())).lastModified();
  auto* box = new QMessageBox(QMessageBox::Question, tr("Recover session"),
                              tr("A HybridLens window did not close cleanly. Recover the session autosaved %1 (%2)?")
                                  .arg(QLocale().toString(when, QLocale::ShortFormat), what),
                              QMessageBox::Yes | QMessageBox::No, this);
  box->setAttribute(Qt::WA_DeleteOnClose);
  connect(box, &QMessageBox::finished, this, [this, orphan](int r) {
    if (r == QMessageBox::Yes) {
      recoverAutosave();
    } else if (autosave_ && autosave_->discard(orphan)) {  // only an orphan: never a live window's
      offerRecovery();                                     // the next one, if any
    }
  });
  box->open();
}

}  // namespace hl::app
