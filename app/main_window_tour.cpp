// File > Open demo model and its guided tour (issue 20 item 3): the bundled models, each with the
// tour's prompts for it (app/demo_tour.h), and the playing of one stop — open the model and its
// fine-tune unless open, feed the prompt as a new run A, re-run it as run B with the stop's toggle,
// then raise the stop's view, select its layer and head and say what to look for.
#include <QDockWidget>
#include <QFileInfo>
#include <QLabel>
#include <QMenu>
#include <QStatusBar>
#include <QTimer>
#include <algorithm>

#include "app/app_settings.h"
#include "app/demo_tour.h"
#include "app/inspector_context.h"
#include "app/main_window.h"
#include "app/run_controller.h"
#include "app/run_panel.h"
#include "app/token_strip.h"
#include "engine/core/error.h"
#include "views/instrument_view.h"

namespace hl::app {

namespace {

bool sameFolder(const QString& a, const QString& b) {
  return QFileInfo(a).canonicalFilePath() == QFileInfo(b).canonicalFilePath();
}

}  // namespace

QStringList MainWindow::viewIds() const {
  QStringList ids;
  for (const hl::views::InstrumentView* v : views_) ids << v->viewId();
  return ids;
}

std::vector<TourStop> MainWindow::bundledTour(const QString& root) {
  const QString file = root + "/tour.json";
  if (root.isEmpty() || !QFileInfo::exists(file)) return {};
  try {
    return readTour(file, viewIds());
  } catch (const hl::Error& e) {
    statusBar()->showMessage(tr("The guided tour was left out: %1").arg(QString::fromUtf8(e.what())), 20000);
    return {};
  }
}

void MainWindow::rebuildDemoMenu() {
  demoMenu_->clear();
  const QString root = bundledModelsDir();
  const std::vector<DemoModel> models = bundledModels(root);
  const std::vector<TourStop> tour = bundledTour(root);
  // The stops of one model, as entries of `menu` under a "Guided tour" section.
  auto addStops = [this, &tour](QMenu* menu, const DemoModel& m, const QString& prefix) {
    bool any = false;
    for (const TourStop& s : tour) {
      if (s.model != m.name) continue;
      if (!any) menu->addSection(tr("Guided tour"));
      any = true;
      QAction* a = menu->addAction(prefix + s.title, this, [this, s, m] { playTour(s, m); });
      a->setToolTip(s.lookFor);
      a->setStatusTip(s.lookFor);
    }
  };
  auto hasStops = [&tour](const QString& name) {
    return std::any_of(tour.begin(), tour.end(), [&](const TourStop& s) { return s.model == name; });
  };
  QMenu* fineTunes = nullptr;
  for (const DemoModel& m : models) {
    if (m.kind == DemoModel::Kind::Checkpoint) {
      if (!hasStops(m.name)) {
        QAction* a = demoMenu_->addAction(m.name, this, [this, d = m.dir] { openDemo(d, QString(), false); });
        a->setToolTip(m.dir);
        continue;
      }
      QMenu* sub = demoMenu_->addMenu(m.name);
      QAction* a = sub->addAction(tr("Open %1").arg(m.name), this, [this, d = m.dir] { openDemo(d, QString(), false); });
      a->setToolTip(m.dir);
      addStops(sub, m, QString());
      continue;
    }
    if (!fineTunes) {
      demoMenu_->addSeparator();
      fineTunes = demoMenu_->addMenu(tr("Fine-tunes of baseline (DoRA view)"));
    }
    const QString method = m.name.section('/', 0, 0);
    QMenu* sub = nullptr;
    for (QAction* a : fineTunes->actions())
      if (a->menu() && a->text() == method) sub = a->menu();
    if (!sub) sub = fineTunes->addMenu(method);
    const bool tuned = m.kind == DemoModel::Kind::Tuned;
    QAction* a = sub->addAction(m.name.section('/', 1) + (tuned ? tr(" (full fine-tune)") : tr(" (adapter)")), this,
                                [this, m, tuned] { openDemo(m.base, m.dir, tuned); });
    a->setToolTip(m.dir);
    addStops(sub, m, m.name.section('/', 1) + ": ");
  }
  const QString random = randomDemoDir();
  if (!random.isEmpty()) {
    if (!models.empty()) demoMenu_->addSeparator();
    demoMenu_->addAction(tr("demo-random (random weights)"), this,
                         [this, random] { openDemo(random, QString(), false); });
  }
  if (demoMenu_->isEmpty()) demoMenu_->addAction(tr("No bundled models found"))->setEnabled(false);
}

void MainWindow::openDemo(const QString& dir, const QString& fineTune, bool tuned) {
  auto next = [this, fineTune, tuned] {
    if (fineTune.isEmpty()) return;
    if (tuned)
      loadTunedCheckpoint(fineTune);
    else
      loadAdapter(fineTune);
  };
  const bool loaded = hasModel() && sameFolder(modelInfo()->dir, dir);
  if (loaded && !fineTune.isEmpty()) {
    next();
    return;
  }
  if (openCheckpoint(dir)) afterLoad_ = next;
}

bool MainWindow::playTour(const TourStop& stop, const DemoModel& m) {
  if (isLoading() || isBusy()) {
    statusBar()->showMessage(tr("Busy: the tour starts once the current load or step is done"), 8000);
    return false;
  }
  const bool fineTune = m.kind != DemoModel::Kind::Checkpoint;
  const QString dir = fineTune ? m.base : m.dir;
  const bool loaded = hasModel() && sameFolder(modelInfo()->dir, dir);
  if (loaded && !maybeDiscard()) return false;  // another model: openCheckpoint asks
  tour_ = std::make_unique<TourPlay>();
  tour_->stop = stop;
  tour_->serial = ++tourSerial_;
  if (loaded && !fineTune) {
    tour_->phase = TourPlay::Phase::Ready;
    QTimer::singleShot(0, this, &MainWindow::advanceTour);
    return true;
  }
  // Once the model (and the fine-tune) is in: the load's own run A comes first, then the stop's.
  auto ready = [this, serial = tour_->serial] {
    if (!tour_ || tour_->serial != serial) return;
    tour_->phase = TourPlay::Phase::Ready;
    advanceTour();
  };
  if (fineTune) {
    connect(this, &MainWindow::adapterLoaded, this, ready, Qt::SingleShotConnection);
    openDemo(m.base, m.dir, m.kind == DemoModel::Kind::Tuned);
  } else if (openCheckpoint(dir)) {
    afterLoad_ = ready;
  } else {
    tour_.reset();
    return false;
  }
  return true;
}

bool MainWindow::playTour(const QString& id) {
  const QString root = bundledModelsDir();
  for (const TourStop& s : bundledTour(root))
    for (const DemoModel& m : bundledModels(root))
      if (s.id == id && s.model == m.name) return playTour(s, m);
  return false;
}

QString MainWindow::tourNote() const {
  return tourNote_->isHidden() ? QString() : tourNote_->text();
}

void MainWindow::startTourRun() {
  tourNote_->hide();
  const TourStop& s = tour_->stop;
  ctl_->newRecording();  // the stop's run A starts as trained, not from the toggles of an older run A
  strip_->clear();
  sessionPath_.clear();
  panel_->setIdsMode(false);
  panel_->setPromptText(s.prompt);
  Toggles t = panel_->toggles();
  t.normalizerOverride = false;
  t.registers = -1;
  t.adapter = false;
  panel_->setToggles(t);
  tour_->phase = TourPlay::Phase::Stepping;
  tour_->tokens = 0;
  const int serial = tour_->serial;
  connect(
      ctl_, &RunController::runOpened, this,
      [this, serial](const RunStart& r) {
        if (!tour_ || tour_->serial != serial) return;
        tour_->tokens = static_cast<int64_t>(r.tokens.size()) + tour_->stop.generate;
        ctl_->stepAfterStart(tour_->tokens);
      },
      Qt::SingleShotConnection);
  if (!resetRun()) {
    tour_.reset();
    return;
  }
  statusBar()->showMessage(tr("Tour: %1 — feeding the prompt").arg(s.title), 8000);
}

void MainWindow::advanceTour() {
  if (!tour_ || tour_->phase == TourPlay::Phase::Loading || isLoading() || isBusy()) return;
  if (tour_->phase == TourPlay::Phase::Ready) {
    startTourRun();
    return;
  }
  const TourStop& s = tour_->stop;
  const hl::Run* a = runA();
  if (tour_->phase == TourPlay::Phase::Stepping) {
    if (!a || tour_->tokens == 0 || static_cast<int64_t>(a->records.size()) < tour_->tokens) return;
    if (s.compareNormalizer || s.compareRegisters >= 0) {
      tour_->phase = TourPlay::Phase::Comparing;
      Toggles t = panel_->toggles();
      if (s.compareNormalizer) {
        t.normalizerOverride = true;
        t.normalizer = *s.compareNormalizer;
      }
      if (s.compareRegisters >= 0) t.registers = s.compareRegisters;
      setToggles(t);
      if (isBusy()) return;  // run B is being computed: idle comes back here
    }
  }
  // Done: the view, the selection and the sentence.
  const TourStop stop = s;
  tour_.reset();
  for (QDockWidget* d : docks_) {
    if (d->objectName() == QStringLiteral("dock_") + stop.view) {
      d->show();
      d->raise();
    }
  }
  if (stop.layer >= 0 && recording() && stop.layer < recording()->config.num_hidden_layers) selectLayer(stop.layer);
  if (stop.head >= 0) selectHead(stop.head);
  if (a && !a->records.empty())
    scrubTo(stop.token >= 0 && stop.token < static_cast<int>(a->records.size()) ? stop.token
                                                                                 : static_cast<int>(a->records.size()) - 1);
  updateAllViews();
  tourNote_->setText(tr("Tour — %1: %2").arg(stop.title, stop.lookFor));
  tourNote_->show();
  statusBar()->showMessage(tr("Tour — %1").arg(stop.title), 10000);
  emit tourFinished(stop.id);
}

}  // namespace hl::app
