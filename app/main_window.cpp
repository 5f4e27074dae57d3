// The main window's frame (see main_window.h): the run panel and token strip in the centre, one
// dock per instrument view (layout remembered in QSettings), menus with keyboard shortcuts, the
// status bar (backend, tokens/s, memory, load progress with Cancel), themes, and Export All.
// View updates are coalesced to at most ~30 per second and skip docks that are hidden.
#include "app/main_window.h"

#include <unistd.h>

#include <QActionGroup>
#include <QApplication>
#include <QCloseEvent>
#include <QDateTime>
#include <QDockWidget>
#include <QFile>
#include <QFileInfo>
#include <QLabel>
#include <QMenuBar>
#include <QProgressBar>
#include <QPushButton>
#include <QScreen>
#include <QSettings>
#include <QStatusBar>
#include <QTimer>
#include <QVBoxLayout>
#include <QWhatsThis>

#include "app/app_settings.h"
#include "app/autosave_store.h"
#include "app/dock_maximizer.h"
#include "app/engine_thread.h"
#include "app/help_dialog.h"
#include "app/inspector_context.h"
#include "app/run_controller.h"
#include "app/run_list.h"
#include "app/run_panel.h"
#include "app/session_io.h"
#include "app/stats_window.h"
#include "app/token_strip.h"
#include "engine/core/sys_memory.h"
#include "engine/model/quantize.h"
#include "views/instrument_view.h"
#include "views/instrument_views.h"
#include "views/view_registry.h"
#include "views/view_util.h"

// The icon lives in a static library's resources: register them (outside any namespace, as
// Q_INIT_RESOURCE requires).
static void initHybridLensResources() {
  Q_INIT_RESOURCE(hybridlens);
}

namespace hl::app {

namespace {
double residentBytes() {
  const int64_t r = hl::resident_memory();  // -1 when unreadable
  return r > 0 ? static_cast<double>(r) : 0;
}

// The CPU's last-level cache (L3, else L2) in bytes, 0 when the C library does not say.
int64_t lastLevelCacheBytes() {
  long b = 0;
#ifdef _SC_LEVEL3_CACHE_SIZE
  b = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
#ifdef _SC_LEVEL2_CACHE_SIZE
  if (b <= 0) b = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
  return b > 0 ? b : 0;
}

double physicalMemoryBytes() {
  return static_cast<double>(hl::physical_memory());
}
}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  initHybridLensResources();
  setObjectName("mainWindow");
  setWindowTitle(tr("HybridLens"));
  setWindowIcon(QIcon(QStringLiteral(":/hybridlens/hybridlens.svg")));
  setAcceptDrops(true);
  setDockNestingEnabled(true);
  setCorner(Qt::BottomLeftCorner, Qt::BottomDockWidgetArea);
  setCorner(Qt::BottomRightCorner, Qt::BottomDockWidgetArea);
  resize(1600, 1000);

  engine_ = new EngineThread(this);
  io_ = new SessionIo(this);
  ctx_ = new InspectorContext(this);
  ctl_ = new RunController(engine_, ctx_, this);
  connect(ctx_, &InspectorContext::viewersUpdated, this, &MainWindow::onViewsUpdated);

  auto* central = new QWidget(this);
  auto* layout = new QVBoxLayout(central);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(2);
  panel_ = new RunPanel(central);
  strip_ = new TokenStrip(central);
  strip_->setObjectName("tokenStrip");
  layout->addWidget(panel_);
  layout->addWidget(strip_, 1);
  // A guided-tour stop's sentence: what to look for (main_window_tour.cpp), until the prompt changes.
  tourNote_ = new QLabel(central);
  tourNote_->setObjectName("tourNote");
  tourNote_->setWordWrap(true);
  tourNote_->setTextFormat(Qt::PlainText);
  tourNote_->setStyleSheet(QStringLiteral("color: #1f5f99; font-weight: bold"));
  tourNote_->setContentsMargins(6, 0, 6, 0);
  tourNote_->hide();
  layout->addWidget(tourNote_);
  // What the strip's colours and marks mean (finding 10 of issue 17).
  auto* legend = new QLabel(tr("Chips: blue = prompt, green = generated, orange = shown token, dashed = not fed "
                               "yet, italic in a dotted grey outline = special token (BOS/EOS, chat template); "
                               "red underline = run B's top-1 differs (hover a chip for both)"),
                            central);
  legend->setObjectName("stripLegend");
  legend->setWordWrap(true);
  QFont small = legend->font();
  small.setPointSizeF(small.pointSizeF() * 0.85);
  legend->setFont(small);
  legend->setContentsMargins(6, 0, 6, 0);
  layout->addWidget(legend);
  // The prompt and the strip (which scrolls) stay compact; a taller window grows the instruments.
  central->setMaximumHeight(320);
  setCentralWidget(central);

  createViews();
  createRunList();
  createMenus();
  createStatusBar();
  // Two default layouts: the 2 × 2 grid for tall screens, one row of two tab stacks for laptops
  // (each view then has twice the height). The screen picks one now; View > Reset layout picks
  // by the window's height then.
  arrangeDefaultDocks(true);
  compactLayout_ = saveState();
  arrangeDefaultDocks(false);
  defaultLayout_ = saveState();
  if (const QScreen* sc = screen(); sc && sc->availableGeometry().height() < kCompactBelowPx)
    restoreState(compactLayout_);

  try {
    autosave_ = std::make_unique<AutosaveStore>(QFile::encodeName(autosaveDir()).toStdString());
  } catch (const std::exception& e) {
    statusBar()->showMessage(tr("Autosave is off: %1").arg(QString::fromUtf8(e.what())));
  }
  autosaveTimer_ = new QTimer(this);
  autosaveTimer_->setInterval(20000);
  connect(autosaveTimer_, &QTimer::timeout, this, &MainWindow::autosaveTick);
  autosaveTimer_->start();
  auto* memoryTimer = new QTimer(this);
  connect(memoryTimer, &QTimer::timeout, this, &MainWindow::updateStatus);
  memoryTimer->start(2000);

  connect(panel_, &RunPanel::resetRequested, this, &MainWindow::resetRun);
  connect(panel_, &RunPanel::stepRequested, this, &MainWindow::stepRun);
  connect(panel_, &RunPanel::stopRequested, this, &MainWindow::stopRun);
  connect(panel_, &RunPanel::togglesChanged, this, &MainWindow::onTogglesChanged);
  connect(panel_, &RunPanel::promptEdited, this, &MainWindow::onPromptEdited);
  connect(panel_, &RunPanel::showDiffChanged, this, [this](bool on) {
    if (diffAction_) diffAction_->setChecked(on);
    ctx_->setShowDiff(on);
  });
  connect(strip_, &TokenStrip::tokenClicked, this, &MainWindow::scrubTo);
  connectEngine();
  connectController();

  // Persistent settings: theme, backend, panel values, window geometry and dock layout.
  QSettings s;
  const QStringList notes = panel_->restoreSettings(s);
  if (!notes.isEmpty()) {
    // Said once and not remembered again: the corrected values are written back (finding 8).
    panel_->saveSettings(s);
    startNote_ = tr("remembered settings corrected: %1").arg(notes.join(QStringLiteral("; ")));
  }
  ctx_->setShowDiff(panel_->showDiff());
  backend_ = s.value("engine/backend", backend_).toString();
  if (backendIsEmulated(backend_)) backend_ = QStringLiteral("auto");  // older versions remembered lavapipe
  restoreGeometry(s.value("window/geometry").toByteArray());
  restoreState(s.value("window/state").toByteArray());
  setDarkTheme(s.value("ui/dark", false).toBool());
  rebuildRecentMenus();
  rebuildDemoMenu();
  updateActions();
  refreshViews(true);
  statusBar()->showMessage(
      tr("Ready: open a checkpoint folder (Ctrl+O), drop one here, or pick File > Open demo model") +
      (startNote_.isEmpty() ? QString() : QStringLiteral(" — ") + startNote_));
}

MainWindow::~MainWindow() {
  // Stop and join the engine thread first (the running command ends at its next token), then let
  // saves in flight finish: neither may outlive the recording they report to.
  delete engine_;
  engine_ = nullptr;
  delete io_;
  io_ = nullptr;
}

void MainWindow::createViews() {
  views_ = hl::views::createAllViews(nullptr);
  hl::views::HardwareInfo hw;
  hw.deviceMemoryBytes = physicalMemoryBytes();
  hw.cacheBytes = lastLevelCacheBytes();
  hw.deviceName = "CPU";
  ctx_->setHardware(hw);
  for (size_t i = 0; i < views_.size(); ++i) {
    hl::views::InstrumentView* v = views_[i];
    auto* dock = new QDockWidget(v->title(), this);
    dock->setObjectName("dock_" + v->viewId());
    dock->setWidget(v);
    dock->setToolTip(tr("%1 — after %2").arg(v->title(), v->reference()));
    docks_.push_back(dock);
    connect(v, &hl::views::InstrumentView::layerClicked, this, &MainWindow::selectLayer);
    connect(v, &hl::views::InstrumentView::stepClicked, this, &MainWindow::scrubTo);
    connect(v, &hl::views::InstrumentView::headClicked, this, &MainWindow::selectHead);
    if (auto* attention = qobject_cast<hl::views::AttentionPatternView*>(v))
      connect(attention, &hl::views::AttentionPatternView::hiddenAttentionWanted, ctl_,
              &RunController::requestHiddenAttention);
    ctx_->addViewer(v);
    connect(dock, &QDockWidget::visibilityChanged, this, [this, v](bool visible) {
      if (visible) ctx_->viewerShown(v);
    });
  }
}

void MainWindow::createRunList() {
  runList_ = new RunList(this);
  auto* dock = new QDockWidget(tr("Runs"), this);
  dock->setObjectName("dock_runs");
  dock->setWidget(runList_);
  dock->setToolTip(runList_->toolTip());
  docks_.push_back(dock);
  connect(runList_, &RunList::runChosen, this, &MainWindow::chooseRun);
  connect(ctx_, &InspectorContext::viewersUpdated, this, &MainWindow::refreshRunList);
}

hl::views::InstrumentView* MainWindow::view(const QString& id) const {
  for (hl::views::InstrumentView* v : views_)
    if (v->viewId() == id) return v;
  return nullptr;
}

void MainWindow::arrangeDefaultDocks(bool compact) {
  // Top: the ribbon, the run panel with the token strip, the next-token candidates. Below, full
  // width, a 2 × 2 grid of instruments with more in tabs, or (compact) one row of two stacks. A
  // saved layout replaces this (QSettings "window/state"); View > Reset layout comes back here.
  auto dock = [&](const char* id) -> QDockWidget* {
    for (QDockWidget* d : docks_)
      if (d->objectName() == QStringLiteral("dock_") + id) return d;
    return nullptr;
  };
  for (QDockWidget* d : docks_) {
    d->setFloating(false);
    d->show();
  }
  addDockWidget(Qt::LeftDockWidgetArea, dock("ribbon"));
  addDockWidget(Qt::RightDockWidgetArea, dock("candidates"));
  // A 2 × 2 grid, each cell a stack of tabs (the first tab raised): big enough that every plot
  // keeps its labels apart on a 1600 × 1000 window; the others are one click away.
  const char* grid[2][2][3] = {{{"entropy", "rank1", "latency"}, {"ssm_delta", "memory", nullptr}},
                               {{"attention", "outliers", nullptr}, {"router", "dora", nullptr}}};
  addDockWidget(Qt::BottomDockWidgetArea, dock(grid[0][0][0]));
  splitDockWidget(dock(grid[0][0][0]), dock(grid[1][0][0]), Qt::Horizontal);
  for (auto& col : grid) {
    if (!compact) splitDockWidget(dock(col[0][0]), dock(col[1][0]), Qt::Vertical);
    for (auto& cell : col) {
      if (compact && &cell != &col[0]) tabifyDockWidget(dock(col[0][0]), dock(cell[0]));
      for (int t = 1; t < 3; ++t)
        if (cell[t]) tabifyDockWidget(dock(cell[0]), dock(cell[t]));
    }
    for (auto& cell : col)
      if (!compact || &cell == &col[0]) dock(cell[0])->raise();
  }
  tabifyDockWidget(dock("candidates"), dock("runs"));
  dock("candidates")->raise();
  resizeDocks({dock("ribbon"), dock("candidates")}, {360, 360}, Qt::Horizontal);
  resizeDocks({dock("entropy"), dock("ssm_delta")}, {320, 320}, Qt::Vertical);
}

void MainWindow::createMenus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  QAction* open = file->addAction(tr("&Open checkpoint…"), this, &MainWindow::chooseCheckpoint);
  open->setShortcut(QKeySequence::Open);
  open->setObjectName("actionOpen");
  QAction* openGguf = file->addAction(tr("Open &GGUF file…"), this, &MainWindow::chooseGguf);
  openGguf->setObjectName("actionOpenGguf");
  openGguf->setToolTip(tr("A llama.cpp GGUF model (one file, or any shard of a split); its tokenizer comes from the file"));
  QMenu* weights = file->addMenu(tr("&Weights on load"));
  weights->setToolTipsVisible(true);
  auto* weightsGroup = new QActionGroup(weights);
  auto* weightsHead = new QAction(tr("Quantise the &LM head too"), weights);
  weightsHead->setCheckable(true);
  weightsHead->setObjectName(QStringLiteral("actionWeightsHead"));
  weightsHead->setToolTip(tr("Also the LM head (and the embedding when they are tied): fewer bytes per token and "
                             "faster decode, but the logits every instrument reads move more"));
  auto* weightsFp32 = new QAction(tr("Keep activations in &fp32"), weights);
  weightsFp32->setCheckable(true);
  weightsFp32->setObjectName(QStringLiteral("actionWeightsFp32Activations"));
  weightsFp32->setToolTip(tr("Multiply block-quantised weights by x in fp32 instead of rounding x to 8 bits per "
                             "block (the default, as llama.cpp does): slower decode on the CPU, and the "
                             "instruments see only the weights' quantisation"));
  // The checked format, with +head when the head is to be quantised too and +fp32-activations when x
  // stays in fp32 (engine/model/quantize.h; "as-stored+fp32-activations" for a GGUF file's blocks).
  const auto applyWeights = [this, weightsGroup, weightsHead, weightsFp32] {
    const QAction* c = weightsGroup->checkedAction();
    QString f = c ? c->data().toString() : QString();
    if (!f.isEmpty() && weightsHead->isChecked()) f += QStringLiteral("+head");
    if (weightsFp32->isChecked())
      f = (f.isEmpty() ? QStringLiteral("as-stored") : f) + QString::fromLatin1(hl::kFp32ActivationsSuffix);
    setWeightsFormat(f);
  };
  for (const auto& [label, format] : {std::pair{tr("As stored"), QString()}, std::pair{tr("Q8_0 (8.5 bits)"), QStringLiteral("q8_0")},
                                      std::pair{tr("Q6_K (6.6 bits)"), QStringLiteral("q6_k")},
                                      std::pair{tr("Q4_K (4.5 bits)"), QStringLiteral("q4_k")}}) {
    QAction* a = weights->addAction(label, this, applyWeights);
    a->setData(format);
    a->setCheckable(true);
    a->setChecked(format.isEmpty());
    a->setObjectName(format.isEmpty() ? QStringLiteral("actionWeightsAsStored") : "actionWeights_" + format);
    a->setToolTip(tr("Quantise the large matrices when a checkpoint loads (embedding, LM head, routers and Mamba-1 "
                     "x/dt projections stay as stored); the status bar and sessions say what changed"));
    weightsGroup->addAction(a);
  }
  weights->addSeparator();
  weights->addAction(weightsHead);
  weights->addAction(weightsFp32);
  connect(weightsHead, &QAction::toggled, this, applyWeights);
  connect(weightsFp32, &QAction::toggled, this, applyWeights);
  recentMenu_ = file->addMenu(tr("Open &recent"));
  demoMenu_ = file->addMenu(tr("Open &demo model"));
  adapterAction_ = file->addAction(tr("Load &adapter (LoRA/DoRA)…"), this, &MainWindow::chooseAdapter);
  adapterAction_->setObjectName("actionAdapter");
  tunedAction_ = file->addAction(tr("Load &fine-tuned checkpoint for DoRA…"), this, &MainWindow::chooseTuned);
  file->addSeparator();
  QAction* openSession = file->addAction(tr("Open &session…"), this, &MainWindow::chooseSession);
  openSession->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_O));
  openSession->setObjectName("actionOpenSession");
  recentSessionsMenu_ = file->addMenu(tr("Recent sessions"));
  saveAction_ = file->addAction(tr("&Save session"), this, &MainWindow::saveCurrent);
  saveAction_->setShortcut(QKeySequence::Save);
  saveAction_->setObjectName("actionSave");
  saveAsAction_ = file->addAction(tr("Save session &as…"), this, &MainWindow::saveSessionAs);
  saveAsAction_->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_S));
  compareAction_ = file->addAction(tr("&Compare with session…"), this, &MainWindow::chooseCompareSession);
  endCompareAction_ = file->addAction(tr("&End session compare"), this, &MainWindow::endSessionCompare);
  file->addSeparator();
  file->addAction(tr("Open sweep s&tatistics…"), this, [this] { chooseStats(false); })->setObjectName("actionOpenStats");
  file->addSeparator();
  exportAllAction_ = file->addAction(tr("&Export all figures…"), this,
                                     [this] { exportDialog(views_, tr("all %1 views").arg(views_.size())); });
  exportAllAction_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_E));
  exportAllAction_->setObjectName("actionExportAll");
  QMenu* exportOne = file->addMenu(tr("Export &view"));
  for (hl::views::InstrumentView* v : views_)
    exportOne->addAction(v->title() + QStringLiteral("…"), this, [this, v] { exportDialog({v}, v->title()); });
  file->addSeparator();
  QAction* quit = file->addAction(tr("&Quit"), this, &QWidget::close);
  quit->setShortcut(QKeySequence::Quit);
  quit->setObjectName("actionQuit");

  QMenu* run = menuBar()->addMenu(tr("&Run"));
  resetAction_ = run->addAction(tr("&Reset run"), this, &MainWindow::resetRun);
  resetAction_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_R));
  stepAction_ = run->addAction(tr("&Step"), this, [this] { stepRun(1); });
  stepAction_->setShortcuts({QKeySequence(Qt::Key_F10), QKeySequence(Qt::CTRL | Qt::Key_Right)});
  stepAction_->setObjectName("actionStep");
  runNAction_ = run->addAction(tr("Run &N"), this, [this] { stepRun(panel_->runCount()); });
  runNAction_->setShortcut(QKeySequence(Qt::Key_F8));
  runEndAction_ = run->addAction(tr("Run to &end"), this, [this] { stepRun(-1); });
  runEndAction_->setShortcut(QKeySequence(Qt::Key_F5));
  stopAction_ = run->addAction(tr("S&top"), this, &MainWindow::stopRun);
  stopAction_->setShortcuts({QKeySequence(Qt::Key_Escape), QKeySequence(Qt::SHIFT | Qt::Key_F5)});
  run->addSeparator();
  auto scrubAction = [&](const QString& text, QList<QKeySequence> keys, std::function<int()> target) {
    QAction* a = run->addAction(text, this, [this, target] {
      if (runA() && !runA()->records.empty()) scrubTo(target());
    });
    a->setShortcuts(keys);
  };
  scrubAction(tr("&Previous token"), {QKeySequence(Qt::ALT | Qt::Key_Left), QKeySequence(Qt::CTRL | Qt::Key_Left)},
              [this] { return std::max(0, currentStep() - 1); });
  scrubAction(tr("Ne&xt token"), {QKeySequence(Qt::ALT | Qt::Key_Right)}, [this] { return currentStep() + 1; });
  scrubAction(tr("&First token"), {QKeySequence(Qt::CTRL | Qt::Key_Home)}, [] { return 0; });
  scrubAction(tr("&Latest token (follow)"), {QKeySequence(Qt::CTRL | Qt::Key_End)}, [] { return -1; });
  run->addSeparator();
  diffAction_ = run->addAction(tr("Show B − A"));
  diffAction_->setCheckable(true);
  diffAction_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_D));
  connect(diffAction_, &QAction::toggled, this, [this](bool on) { setShowDiff(on); });

  QMenu* viewMenu = menuBar()->addMenu(tr("&View"));
  for (QDockWidget* d : docks_) viewMenu->addAction(d->toggleViewAction());
  viewMenu->addSeparator();
  auto* maximizer = new DockMaximizer(this, docks_);
  QAction* maximise = viewMenu->addAction(tr("&Maximise view / restore"), this, [maximizer] { maximizer->toggle(); });
  maximise->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_M));
  maximise->setObjectName("actionMaximise");
  maximise->setToolTip(tr("The view under the mouse fills the window; again to restore (or double-click its title)"));
  QAction* resetLayout = viewMenu->addAction(tr("Reset &layout"), this, [this, maximizer] {
    maximizer->restore();
    restoreState(height() < kCompactBelowPx ? compactLayout_ : defaultLayout_);
    refreshViews(true);
  });
  resetLayout->setObjectName("actionResetLayout");
  resetLayout->setToolTip(tr("The default docks: a 2 × 2 grid of views, or on a window under %1 px high one row "
                             "of two tab stacks").arg(kCompactBelowPx));
  darkAction_ = viewMenu->addAction(tr("&Dark theme"));
  darkAction_->setCheckable(true);
  darkAction_->setObjectName("actionDark");
  connect(darkAction_, &QAction::toggled, this, [this](bool on) { setDarkTheme(on); });
  backendMenu_ = viewMenu->addMenu(tr("&Backend"));
  backendMenu_->addAction(tr("(the backends are listed once a checkpoint is loaded)"))->setEnabled(false);

  QMenu* help = menuBar()->addMenu(tr("&Help"));
  QAction* instruments = help->addAction(tr("&Instruments…"), this, [this] { showInstrumentsHelp(this); });
  instruments->setShortcut(QKeySequence::HelpContents);
  instruments->setObjectName("actionInstrumentsHelp");
  help->addAction(QWhatsThis::createAction(help));
  help->addAction(tr("&Keyboard shortcuts"), this, &MainWindow::showShortcuts);
  QAction* about = help->addAction(tr("&About HybridLens"), this, &MainWindow::showAbout);
  about->setObjectName("actionAbout");
}

void MainWindow::createStatusBar() {
  progress_ = new QProgressBar(this);
  progress_->setObjectName("loadProgress");
  progress_->setMaximumWidth(220);
  progress_->setTextVisible(true);
  progress_->hide();
  cancelButton_ = new QPushButton(tr("Cancel"), this);
  cancelButton_->setObjectName("cancelLoad");
  cancelButton_->setToolTip(tr("Stop loading the checkpoint; the model loaded before stays in use"));
  cancelButton_->hide();
  connect(cancelButton_, &QPushButton::clicked, this, &MainWindow::cancelLoad);
  backendLabel_ = new QLabel(this);
  speedLabel_ = new QLabel(this);
  memoryLabel_ = new QLabel(this);
  backendLabel_->setObjectName("backendLabel");
  speedLabel_->setObjectName("speedLabel");
  memoryLabel_->setObjectName("memoryLabel");
  statusBar()->addPermanentWidget(progress_);
  statusBar()->addPermanentWidget(cancelButton_);
  statusBar()->addPermanentWidget(backendLabel_);
  statusBar()->addPermanentWidget(speedLabel_);
  statusBar()->addPermanentWidget(memoryLabel_);
}

const hl::Run* MainWindow::runA() const {
  return ctx_->runA();
}

const hl::Run* MainWindow::runB() const {
  return ctx_->runB();
}

const hl::Recording* MainWindow::recording() const {
  return ctx_->recording();
}

hl::Recording* MainWindow::rec() const {
  return ctx_->mutableRecording();
}

const std::vector<hl::DoraRow>& MainWindow::doraRows() const {
  return ctx_->doraRows();
}

hl::views::ViewState MainWindow::viewState() const {
  return ctx_->viewState();
}

int MainWindow::currentStep() const {
  return ctx_->currentStep();
}

void MainWindow::refreshViews(bool all) {
  ctx_->flush(all);
}

void MainWindow::onViewsUpdated() {
  strip_->setCurrent(currentStep());
  updateStatus();
}

void MainWindow::updateAllViews() {
  refreshViews(true);
}

void MainWindow::updateStatus() {
  // The backend the run uses, whether auto chose it, and a different choice waiting for Reset.
  const QString requested = property("hlRunRequestedBackend").toString();
  const QString runBackend = ctl_->runBackend();
  QString backend = runBackend.isEmpty() ? backendMenuLabel(backend_) : backendMenuLabel(runBackend);
  if (!runBackend.isEmpty() && requested == QLatin1String("auto")) backend += tr(" (chosen by auto)");
  if (!runBackend.isEmpty() && backend_ != requested) backend += tr(" · %1 from the next Reset").arg(backend_);
  backendLabel_->setText(tr("backend: %1").arg(backend));
  const hl::Run* a = runA();
  double secs = 0;
  int n = 0;
  if (a) {
    for (auto it = a->records.rbegin(); it != a->records.rend() && n < 32; ++it, ++n) secs += it->step_seconds;
  }
  speedLabel_->setText(n > 0 && secs > 0 ? tr("%1 tokens/s").arg(n / secs, 0, 'f', n / secs >= 100 ? 0 : 1)
                                         : tr("— tokens/s"));
  QString mem = tr("memory %1").arg(hl::views::humanBytes(residentBytes()));
  const int t = currentStep();
  if (a && t >= 0) {
    const hl::TokenTrace& r = a->records[t];
    mem += tr(" · KV %1 + state %2")
               .arg(hl::views::humanBytes(static_cast<double>(r.kv_cache_bytes)),
                    hl::views::humanBytes(static_cast<double>(r.ssm_state_bytes)));
  }
  memoryLabel_->setText(mem);
}

void MainWindow::updateActions() {
  const bool haveRun = runA() != nullptr;
  const bool live = hasModel() && !isViewOnly();
  panel_->setState(hasModel(), isBusy(), canStep(), isViewOnly());
  for (QAction* a : {stepAction_, runNAction_, runEndAction_}) a->setEnabled(canStep() && !isBusy());
  resetAction_->setEnabled(live && !isBusy());
  stopAction_->setEnabled(isBusy());
  saveAction_->setEnabled(haveRun);
  saveAsAction_->setEnabled(haveRun);
  compareAction_->setEnabled(haveRun);
  endCompareAction_->setEnabled(ctx_->hasComparedSession());
  adapterAction_->setEnabled(hasModel() && !isLoading());
  tunedAction_->setEnabled(hasModel() && !isLoading());
  QString title = tr("HybridLens");
  if (hasModel()) title = modelInfo()->name + QStringLiteral(" — ") + title;
  if (!sessionPath_.isEmpty()) title = QFileInfo(sessionPath_).fileName() + QStringLiteral(" — ") + title;
  if (isViewOnly()) title += tr(" (view only)");
  setWindowTitle((isDirty() ? QStringLiteral("* ") : QString()) + title);
  panel_->setRunSummary(ctl_->summary());
}

void MainWindow::exportDialog(const std::vector<hl::views::InstrumentView*>& which, const QString& what) {
  ExportOptions o;
  o.load();
  ExportDialog d(o, what, this);
  if (d.exec() != QDialog::Accepted) return;
  o = d.options();
  o.save();
  refreshViews(true);
  const ExportResult r = exportViews(which, o);
  statusBar()->showMessage(tr("Exported %1 files to %2").arg(r.written.size()).arg(o.folder), 8000);
  if (!r.errors.isEmpty()) reportError(tr("Export"), r.errors.join('\n'));
}

ExportResult MainWindow::exportAll(const ExportOptions& o) {
  refreshViews(true);
  return exportViews(views_, o);
}

void MainWindow::setDarkTheme(bool dark) {
  dark_ = dark;
  applyAppTheme(dark);
  for (hl::views::InstrumentView* v : views_) v->applyTheme(dark);
  if (stats_) stats_->applyTheme(dark);
  if (darkAction_ && darkAction_->isChecked() != dark) darkAction_->setChecked(dark);
  QSettings().setValue("ui/dark", dark);
  strip_->update();
}

void MainWindow::saveWindowSettings() {
  QSettings s;
  s.setValue("window/geometry", saveGeometry());
  s.setValue("window/state", saveState());
  if (!backendIsEmulated(backend_)) s.setValue("engine/backend", backend_);
  panel_->saveSettings(s);
}

void MainWindow::closeEvent(QCloseEvent* e) {
  if (!maybeDiscard()) {
    e->ignore();
    return;
  }
  saveWindowSettings();
  clearAutosave();
  e->accept();
}

}  // namespace hl::app
