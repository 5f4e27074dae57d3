// The main window (issue 5 items 1, 2, 4-6; issue 6 items 2, 4, 5): the frame — menus, the run
// panel, the token strip, every instrument view as a dock, the status bar, dialogs and the session
// commands. What the views look at (recording, runs, step, layer, head) is the InspectorContext's;
// the run logic (run ids, busy flags, stepping, compare runs, hidden-attention requests, change
// counters) is the RunController's (issue 17 item 1): the window builds its requests from the
// controls and shows what it says. Split by feature: main_window.cpp (frame, views),
// main_window_model.cpp (checkpoints, adapters, errors), main_window_run.cpp (the controls and the
// strip wired to the controller), main_window_session.cpp (sessions, autosave), main_window_stats.cpp
// (the sweep statistics window), main_window_help.cpp (the shortcuts and About dialogs).
#pragma once
#include <QMainWindow>
#include <QMessageBox>
#include <QString>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "app/app_settings.h"
#include "app/demo_tour.h"
#include "app/engine_types.h"
#include "app/export_dialog.h"
#include "views/view_state.h"

class QDockWidget;
class QLabel;
class QMenu;
class QProgressBar;
class QPushButton;
class QTimer;

namespace hl::views {
class InstrumentView;
}

namespace hl::app {

class AutosaveStore;
class EngineThread;
class InspectorContext;
class RunController;
class RunList;
struct PromptKey;
class RunPanel;
class SessionIo;
class StatsWindow;
class TokenStrip;

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  // --- Checkpoints (main_window_model.cpp) ---
  // Starts loading `dir` on the engine thread; modelLoaded or loadFailed follows. False while a
  // load runs or when the user keeps unsaved work. On failure the current model stays usable.
  bool openCheckpoint(const QString& dir);
  void cancelLoad();
  bool isLoading() const;
  bool hasModel() const;
  const ModelInfo* modelInfo() const;
  // A PEFT adapter (DoRA view + adapter toggle) or a fine-tuned checkpoint (DoRA view) against the
  // loaded model; adapterLoaded or an error follows.
  void loadAdapter(const QString& dir);
  void loadTunedCheckpoint(const QString& dir);
  const std::vector<hl::DoraRow>& doraRows() const;

  // --- Stepping (main_window_run.cpp) ---
  // A new run A from the prompt with the current toggles. False without a model or while busy.
  bool resetRun();
  // n steps (n < 0: to the end). False when nothing can step now.
  bool stepRun(int64_t n);
  void stopRun();
  bool isBusy() const;
  bool canStep() const;
  // Scrubs every view to token `step` (-1: follow the latest).
  void scrubTo(int step);
  int currentStep() const;  // the token the views show (-1: none)
  void selectLayer(int layer);
  void selectHead(int head);
  // As if the user changed the toggles: a difference from run A re-runs the same tokens as run B.
  void setToggles(const Toggles& t);
  void setShowDiff(bool on);

  // --- Sessions (main_window_session.cpp) ---
  // Save runs in the background (sessionSaved / errorReported); open replaces the recording after
  // the file has been read and checked, then continues stepping when its checkpoint is at hand.
  bool saveSession(const QString& path);
  bool openSession(const QString& path);
  bool compareWithSession(const QString& path);
  void endSessionCompare();
  bool isViewOnly() const;
  bool isDirty() const;
  QString sessionPath() const { return sessionPath_; }
  void setAutosaveInterval(int ms);
  void autosaveNow();
  bool hasRecovery() const;  // an autosave left by an instance that is gone (AutosaveStore)
  bool recoverAutosave();    // opens the newest such as unsaved work
  bool hasAutosave() const;  // this instance's own autosave is on disk
  void offerRecovery();      // asks (non-modal) when hasRecovery()
  // True when the current work may be discarded (not dirty, saved, or the user said Discard).
  bool maybeDiscard();

  // --- The demo models' guided tour (main_window_tour.cpp; issue 20 item 3) ---
  // Plays one stop: opens its model (and fine-tune) unless open, feeds the prompt as a new run A
  // (as trained), runs the stop's run B, raises its view and says what to look for (under the
  // token strip). False when nothing starts (busy, or the user kept unsaved work).
  bool playTour(const TourStop& stop, const DemoModel& model);
  bool playTour(const QString& id);  // a stop of the bundled tour by its id; false when there is none
  // The stops of ROOT/tour.json; a bad file is said in the status bar and gives none.
  std::vector<TourStop> bundledTour(const QString& root);
  QStringList viewIds() const;
  bool tourPlaying() const { return tour_ != nullptr; }
  QString tourNote() const;  // the last stop's "title: sentence" while it is shown, else empty

  // --- Sweep statistics (main_window_stats.cpp; issue 21 item 2) ---
  // The "Sweep statistics" window (created on first use; the model, runs and session stay as they
  // are). openStats reads `path` in the background as sweep A; compareStats as sweep B beside it.
  // A file that cannot be read, or a B of another shape, is one line through reportError.
  StatsWindow* statsWindow();
  bool openStats(const QString& path);
  bool compareStats(const QString& path);

  // --- Views and export (main_window.cpp) ---
  const hl::Recording* recording() const;
  InspectorContext* context() const { return ctx_; }
  RunController* runController() const { return ctl_; }
  const hl::Run* runA() const;
  const hl::Run* runB() const;  // the toggled run B, or the compared session's run
  TokenStrip* tokenStrip() const { return strip_; }
  RunPanel* runPanel() const { return panel_; }
  const std::vector<hl::views::InstrumentView*>& views() const { return views_; }
  hl::views::InstrumentView* view(const QString& id) const;
  hl::views::ViewState viewState() const;
  void updateAllViews();  // pushes the current state to every view now, hidden docks included
  ExportResult exportAll(const ExportOptions& o);
  void setDarkTheme(bool dark);
  bool darkTheme() const { return dark_; }

  // Test and embedding hooks: errors go to `h` instead of a dialog; the unsaved-work question is
  // answered by `d` (QMessageBox::Save, Discard or Cancel) instead of a dialog.
  using ErrorHook = std::function<void(const QString& title, const QString& message)>;
  using DiscardHook = std::function<QMessageBox::StandardButton()>;
  void setErrorHook(ErrorHook h) { errorHook_ = std::move(h); }
  void setDiscardHook(DiscardHook d) { discardHook_ = std::move(d); }
  // Answers the sweep statistics' file choosers (File > Open sweep statistics…, Compare with…)
  // instead of a file dialog: given the dialog's title, returns a path ("" cancels).
  using FileHook = std::function<QString(const QString& title)>;
  void setFileHook(FileHook f) { fileHook_ = std::move(f); }
  void reportError(const QString& title, const QString& message);

 signals:
  void modelLoaded(const QString& dir);
  void loadFailed(const QString& message);
  void adapterLoaded(const QString& dir);
  void runStarted();
  void stepped(int tokens);  // a step's records arrived; `tokens` fed so far
  void idle();               // the engine finished a step, compare or resume command
  void compareChanged();     // run B appeared, changed or went
  void sessionSaved(const QString& path);
  void sessionOpened(const QString& path);
  void sessionResumed(bool canStep);
  void errorReported(const QString& title, const QString& message);
  void tourFinished(const QString& id);  // a guided-tour stop has its runs, view and sentence

 protected:
  void closeEvent(QCloseEvent* e) override;
  void dragEnterEvent(QDragEnterEvent* e) override;
  void dropEvent(QDropEvent* e) override;

 private:
  // main_window.cpp
  void createViews();
  void createRunList();
  void arrangeDefaultDocks(bool compact);
  void createMenus();
  void createStatusBar();
  void rebuildRecentMenus();
  void rebuildDemoMenu();
  void refreshViews(bool all);
  void onViewsUpdated();
  hl::Recording* rec() const;  // the context's recording, for the run and session logic
  void updateStatus();
  void updateActions();
  void exportDialog(const std::vector<hl::views::InstrumentView*>& which, const QString& what);
  void saveWindowSettings();
  // main_window_help.cpp
  void showShortcuts();
  void showAbout();
  // main_window_model.cpp
  void connectEngine();
  void chooseCheckpoint();
  void chooseGguf();
  // File > Weights on load: remembers the format and reloads the open checkpoint with it.
  void setWeightsFormat(const QString& format);
  void chooseAdapter();
  void chooseTuned();
  void openDemo(const QString& dir, const QString& adapter, bool tuned);
  void onLoadProgress(int requestId, qint64 done, qint64 total, const QString& what);
  void onModelLoaded(const ModelInfo& info);
  void onLoadFailed(int requestId, const QString& dir, const QString& message, bool cancelled);
  void onAdapterLoaded(const AdapterInfo& info);
  void setBackend(const QString& name);
  // main_window_run.cpp
  void connectController();
  void onRunOpened(const RunStart& s);
  void onAutoStartFailed(const QString& message);
  void onStepFinished(const QString& reason);
  void onTogglesChanged();
  void chooseRun(int index);  // the run list: compare run `index` with A
  void refreshRunList();
  void setStripFromRecording();
  void markDifferences(int from);
  void defaultPrompt();
  // Prompt box against the live run (finding 1): a note while they differ; Step then restarts.
  PromptKey promptKey() const;
  bool promptEdited() const;
  void onPromptEdited();
  // main_window_session.cpp
  void saveSessionAs();
  void saveCurrent();
  void chooseSession();
  void chooseCompareSession();
  void applySession(std::shared_ptr<hl::Recording> loaded, const QString& path, bool recovered);
  void resumeSession(bool adapterTried = false);
  void onResumed(const QString& error);
  std::shared_ptr<const hl::Recording> snapshot() const;
  void autosaveTick();
  void clearAutosave();
  // main_window_stats.cpp
  void chooseStats(bool asB);
  // main_window_tour.cpp
  void startTourRun();
  void advanceTour();  // on every state change while a stop plays
  struct TourPlay {
    TourStop stop;
    int serial = 0;
    // Loading: the model or fine-tune is not in yet; Ready: start the stop's run A once nothing is busy.
    enum class Phase { Loading, Ready, Stepping, Comparing } phase = Phase::Loading;
    int64_t tokens = 0;  // the records run A has when the stop's steps are done
  };
  std::unique_ptr<TourPlay> tour_;
  int tourSerial_ = 0;
  QLabel* tourNote_ = nullptr;  // under the token strip

  EngineThread* engine_ = nullptr;
  SessionIo* io_ = nullptr;
  RunPanel* panel_ = nullptr;
  TokenStrip* strip_ = nullptr;
  std::vector<hl::views::InstrumentView*> views_;
  std::vector<QDockWidget*> docks_;
  InspectorContext* ctx_ = nullptr;  // the recording, step, selection; tells the views what changed
  RunController* ctl_ = nullptr;     // the model at hand, the runs and what the engine does for them
  QByteArray defaultLayout_, compactLayout_;
  // Windows (or screens) less high than this get the compact default layout.
  static constexpr int kCompactBelowPx = 960;

  // Loads (the model and adapter once loaded are the controller's).
  int loadRequest_ = 0;
  QString backend_ = QStringLiteral("auto");  // the user's choice, for the next run
  std::function<void()> afterLoad_;     // once a model is in: a demo's adapter, or a session's resume
  std::function<void()> afterAdapter_;  // once an adapter is in (or failed): a session's resume
  bool keepRecordingOnLoad_ = false;    // a session waits for its checkpoint: do not start a new run

  RunList* runList_ = nullptr;
  StatsWindow* stats_ = nullptr;  // the sweep statistics window, once opened
  QString startNote_;  // why the remembered prompt was replaced, said when the run starts
  bool dark_ = false;

  // Sessions (the change counters are the controller's).
  QString sessionPath_;
  QTimer* autosaveTimer_ = nullptr;
  bool autosaving_ = false;
  std::unique_ptr<AutosaveStore> autosave_;  // null when the folder cannot be used

  ErrorHook errorHook_;
  DiscardHook discardHook_;
  FileHook fileHook_;

  // Widgets of the status bar and menus that change.
  QLabel *backendLabel_ = nullptr, *speedLabel_ = nullptr, *memoryLabel_ = nullptr;
  QProgressBar* progress_ = nullptr;
  QPushButton* cancelButton_ = nullptr;
  QMenu *recentMenu_ = nullptr, *recentSessionsMenu_ = nullptr, *demoMenu_ = nullptr, *backendMenu_ = nullptr;
  QString weightsFormat_;  // File > Weights on load: a --weights format ("q8_0", "q4_k+head"), empty for as stored
  QAction *saveAction_ = nullptr, *saveAsAction_ = nullptr, *compareAction_ = nullptr, *endCompareAction_ = nullptr;
  QAction *adapterAction_ = nullptr, *tunedAction_ = nullptr, *exportAllAction_ = nullptr;
  QAction *stepAction_ = nullptr, *runNAction_ = nullptr, *runEndAction_ = nullptr, *stopAction_ = nullptr,
          *resetAction_ = nullptr;
  QAction *darkAction_ = nullptr, *diffAction_ = nullptr;
};

}  // namespace hl::app
