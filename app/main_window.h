// The main window (issue 5 items 1, 2, 4-6; issue 6 items 2, 4, 5): menus, the run panel, the token
// strip, every instrument view as a dock, the status bar and the session commands. All engine work
// goes to the one engine thread; results come back as queued value copies, never waited on. Split
// by feature: main_window.cpp (frame, views), main_window_model.cpp (checkpoints, adapters, errors),
// main_window_run.cpp (stepping, scrubbing), main_window_compare.cpp (the compare runs and the run
// list), main_window_session.cpp (sessions, autosave).
// What the views look at (recording, runs, step, layer, head) is the InspectorContext's.
#pragma once
#include <QMainWindow>
#include <QMessageBox>
#include <QString>
#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

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
class RunList;
class RunPanel;
class SessionIo;
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
  bool isLoading() const { return loading_; }
  bool hasModel() const { return modelInfo_.has_value(); }
  const ModelInfo* modelInfo() const { return modelInfo_ ? &*modelInfo_ : nullptr; }
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
  bool isBusy() const { return busy_ || compareBusy_; }
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
  bool isViewOnly() const { return viewOnly_; }
  bool isDirty() const { return changes_ != savedChanges_; }
  QString sessionPath() const { return sessionPath_; }
  void setAutosaveInterval(int ms);
  void autosaveNow();
  bool hasRecovery() const;  // an autosave left by an instance that is gone (AutosaveStore)
  bool recoverAutosave();    // opens the newest such as unsaved work
  bool hasAutosave() const;  // this instance's own autosave is on disk
  void offerRecovery();      // asks (non-modal) when hasRecovery()
  // True when the current work may be discarded (not dirty, saved, or the user said Discard).
  bool maybeDiscard();

  // --- Views and export (main_window.cpp) ---
  const hl::Recording* recording() const;
  InspectorContext* context() const { return ctx_; }
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
  void onRunStarted(const RunStart& s);
  void onStepped(const StepResult& r);
  void onStepDone(int runId, const QString& reason);
  // The attention view wants an SSM layer's hidden attention: one request in flight, the latest next.
  void requestHiddenAttention(int layer, int token, int head);
  void sendHiddenRequest();
  void onHiddenAttention(int runId, const hl::views::HiddenPattern& p);
  // main_window_compare.cpp
  void onTogglesChanged();
  void startCompare(int index, const Toggles& t);  // run `index` of the recording (or a new one) with `t`
  void chooseRun(int index);                        // the run list: compare run `index` with A
  void refreshRunList();
  void onCompareReady(int runId, int compareId, const hl::Run& b);
  void onCompareFailed(int runId, int compareId, const QString& message);
  void clearLiveCompare();
  void setStripFromRecording();
  void markDifferences(int from);
  QString runSummary() const;
  void defaultPrompt();
  // Prompt box against the live run (finding 1): a note while they differ; Step then restarts.
  struct PromptKey {
    QString text;
    bool ids = false, bos = true;
    bool operator==(const PromptKey& o) const { return text == o.text && ids == o.ids && (ids || bos == o.bos); }
  };
  PromptKey promptKey() const;
  bool promptEdited() const;
  void onPromptEdited();
  void syncTogglesToRecording();  // the toggles show the recording's last run (finding 4)
  // main_window_session.cpp
  void saveSessionAs();
  void saveCurrent();
  void chooseSession();
  void chooseCompareSession();
  void applySession(std::shared_ptr<hl::Recording> loaded, const QString& path, bool recovered);
  void resumeSession(bool adapterTried = false);
  void onResumed(int runId, const QString& error);
  std::shared_ptr<const hl::Recording> snapshot() const;
  void autosaveTick();
  void clearAutosave();

  EngineThread* engine_ = nullptr;
  SessionIo* io_ = nullptr;
  RunPanel* panel_ = nullptr;
  TokenStrip* strip_ = nullptr;
  std::vector<hl::views::InstrumentView*> views_;
  std::vector<QDockWidget*> docks_;
  InspectorContext* ctx_ = nullptr;  // the recording, step, selection; tells the views what changed
  QByteArray defaultLayout_, compactLayout_;
  // Windows (or screens) less high than this get the compact default layout.
  static constexpr int kCompactBelowPx = 960;

  // Model and adapter.
  std::optional<ModelInfo> modelInfo_;
  std::optional<AdapterInfo> adapter_;
  bool loading_ = false;
  int loadRequest_ = 0;
  QString backend_ = QStringLiteral("auto");
  QString runBackend_;  // resolved name of the live run's backend
  std::function<void()> afterLoad_;     // once a model is in: a demo's adapter, or a session's resume
  std::function<void()> afterAdapter_;  // once an adapter is in (or failed): a session's resume
  bool keepRecordingOnLoad_ = false;    // a session waits for its checkpoint: do not start a new run

  // The run (the recording itself is the context's: run A, then the compare runs B, C, ...).
  int runId_ = 0, compareId_ = 0;
  bool busy_ = false, compareBusy_ = false, viewOnly_ = false;
  int liveRun_ = -1;        // the recording's run the engine steps along with A (== runs.size(): a new one)
  Toggles shownToggles_;    // what the toggles showed before the latest change
  Toggles resetCompare_;    // the toggles when Reset was pressed: run B of the new run when not A's
  RunList* runList_ = nullptr;
  std::optional<PromptKey> runPrompt_, requestedPrompt_;  // the live run's prompt; a Reset's, until it starts
  int64_t stepAfterStart_ = 0;  // Step pressed with an edited prompt: steps once the new run starts
  bool autoStarted_ = false;    // the run being started came from loading a model, not from Reset
  QString startNote_;           // why the remembered prompt was replaced, said when the run starts
  bool hiddenInFlight_ = false;             // a hidden-attention request is with the engine
  std::optional<std::array<int, 3>> hiddenWanted_;  // (layer, token, head) to ask for next
  std::vector<int32_t> pendingPrompt_;  // prompt tokens not fed yet
  std::vector<std::string> pendingText_;
  std::vector<char> pendingSpecial_;  // per pending token: special (from the engine)
  bool dark_ = false;

  // Sessions.
  QString sessionPath_;
  uint64_t changes_ = 0, savedChanges_ = 0, autosavedChanges_ = 0;
  QTimer* autosaveTimer_ = nullptr;
  bool autosaving_ = false;
  std::unique_ptr<AutosaveStore> autosave_;  // null when the folder cannot be used

  ErrorHook errorHook_;
  DiscardHook discardHook_;

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
