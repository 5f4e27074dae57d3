// StatsDocument (see stats_document.h): background reads with QThread::create, as SessionIo does
// for sessions, and the shared state pushed to every view.
#include "app/stats_document.h"

#include <QFile>
#include <QFileInfo>
#include <QThread>
#include <exception>

#include "app/background_job.h"
#include "sessions/sweep_summary.h"

namespace hl::app {

StatsDocument::StatsDocument(QObject* parent) : QObject(parent) {}

StatsDocument::~StatsDocument() {
  for (QThread* t : findChildren<QThread*>()) t->wait();
}

void StatsDocument::open(const QString& path, bool asB) {
  run_in_background<hl::SweepFile>(
      this, &reads_,
      [path] { return std::make_shared<hl::SweepFile>(hl::load_sweep_stats(QFile::encodeName(path).toStdString())); },
      [this, path, asB](std::shared_ptr<hl::SweepFile> file, const QString& error) {
        if (!file) {
          // The reader's line names the file; a failure before it (no such file) may not.
          QString m = error.simplified();
          if (!m.contains(path) && !m.contains(QFileInfo(path).fileName())) m = path + QStringLiteral(": ") + m;
          emit failed(asB ? tr("Could not open the sweep to compare") : tr("Could not open the sweep statistics"), m);
          return;
        }
        if (asB)
          setB(file, path);
        else
          setA(file, path);
      });
}

void StatsDocument::setA(std::shared_ptr<const hl::SweepFile> f, const QString& path) {
  state_.a = std::move(f);
  state_.nameA = QFileInfo(path).fileName();
  pathA_ = path;
  if (state_.b && !hl::compare_sweeps(*state_.a, *state_.b).mismatch.empty()) {
    state_.b.reset();
    state_.nameB.clear();
    pathB_.clear();
  }
  differences_.clear();
  if (state_.b)
    for (const std::string& d : hl::compare_sweeps(*state_.a, *state_.b).differences)
      differences_ << QString::fromStdString(d);
  publish();
}

bool StatsDocument::setB(std::shared_ptr<const hl::SweepFile> f, const QString& path) {
  if (!state_.a) {
    emit failed(tr("Cannot compare the sweeps"), tr("%1: open sweep A first").arg(path));
    return false;
  }
  const hl::SweepComparison c = hl::compare_sweeps(*state_.a, *f);
  if (!c.mismatch.empty()) {
    emit failed(tr("Cannot compare the sweeps"),
                tr("%1 vs %2: %3").arg(state_.nameA, QFileInfo(path).fileName(), QString::fromStdString(c.mismatch)));
    return false;
  }
  state_.b = std::move(f);
  state_.nameB = QFileInfo(path).fileName();
  pathB_ = path;
  differences_.clear();
  for (const std::string& d : c.differences) differences_ << QString::fromStdString(d);
  publish();
  return true;
}

void StatsDocument::clearB() {
  state_.b.reset();
  state_.nameB.clear();
  pathB_.clear();
  differences_.clear();
  publish();
}

void StatsDocument::setInstrument(int i) {
  if (i == state_.instrument) return;
  state_.instrument = i;
  publish();
}

void StatsDocument::setRow(int row) {
  if (row == state_.row) return;
  state_.row = row;
  publish();
}

void StatsDocument::addViewer(hl::views::StatsView* v) {
  viewers_.push_back(v);
  v->setStats(state_);
}

void StatsDocument::publish() {
  for (hl::views::StatsView* v : viewers_) v->setStats(state_);
  emit changed();
}

}  // namespace hl::app
