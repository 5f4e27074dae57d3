// InspectorContext: the one object that owns what the instruments look at (issue 17 item 1, after
// the capture context of RenderDoc's qrenderdoc): the open recording (its runs share their records,
// sessions/record_list.h), a compared session's run, the current token, layer and head, and the
// display settings; it tells its viewers what changed (recording opened/closed, runs changed, records
// appended from token t, step, selection, settings), coalesced to ~30 updates per second and held
// back for hidden viewers. No model math and no engine calls: the main window and its controllers
// change it; views read it through InspectorViewer.
#pragma once
#include <QObject>
#include <QString>
#include <memory>
#include <string>
#include <vector>

#include "engine/probes/dora_probe.h"
#include "sessions/recording.h"
#include "views/inspector_viewer.h"
#include "views/view_state.h"

class QTimer;

namespace hl::app {

class InspectorContext : public QObject {
  Q_OBJECT

 public:
  explicit InspectorContext(QObject* parent = nullptr);
  ~InspectorContext() override;

  // --- The recording ---
  // Replaces the open recording (the old one is released: see releaseMemory) and resets the step
  // and the compared session; the layer and head stay unless `resetSelection`.
  void openRecording(std::shared_ptr<hl::Recording> rec, bool resetSelection);
  void closeRecording();
  const hl::Recording* recording() const { return rec_.get(); }
  hl::Recording* mutableRecording() { return rec_.get(); }  // for the run and session controllers
  // A copy for a background writer: T shared pointers per run, never the records themselves.
  std::shared_ptr<const hl::Recording> snapshot() const;
  const hl::Run* runA() const;
  const hl::Run* runB() const;  // the compared session's run, else the recording's selected compare run
  // Which of the recording's runs the views compare with A (issue 17 item 5: any number of runs):
  // 1..runs−1, or -1 for none. Opening a recording selects its second run when it has one.
  void setCompareIndex(int index);
  int compareIndex() const { return compareIndex_; }
  // Call after appending records [from, T) to the recording's runs (run A, and B when live).
  void recordsAppended(int from);
  // Call after adding, replacing or removing a run of the recording.
  void runsChanged();

  // A second session compared with this one: its run aligned on the common tokens, or none.
  void setComparedSession(std::shared_ptr<const hl::Recording> other, std::unique_ptr<hl::Run> run,
                          const QString& name);
  void clearComparedSession();
  bool hasComparedSession() const { return comparedRun_ != nullptr; }
  QString comparedName() const { return comparedName_; }

  // --- What the views show ---
  void setStep(int step);  // -1 or the last token: follow the latest
  int step() const { return step_; }
  int currentStep() const;  // the token shown (-1: none)
  void setLayer(int layer);
  void setHead(int head);
  int layer() const { return layer_; }
  int head() const { return head_; }
  void setShowDiff(bool on);
  bool showDiff() const { return showDiff_; }
  void setDora(std::vector<hl::DoraRow> rows, const QString& label);
  const std::vector<hl::DoraRow>& doraRows() const { return dora_; }
  void setHardware(const hl::views::HardwareInfo& hw);
  const hl::views::HardwareInfo& hardware() const { return hw_; }
  void setVocabulary(const std::vector<std::string>* vocab);  // owned by the caller (the model info)
  // The SSM hidden attention the engine computed for the attention view (stamped with the current
  // dataVersion); cleared when the recording is opened, closed or its runs change.
  void setHiddenPattern(hl::views::HiddenPattern p);
  const hl::views::HiddenPattern* hiddenPattern() const { return hidden_.get(); }
  hl::views::ViewState viewState() const;

  // --- Viewers ---
  void addViewer(hl::views::InspectorViewer* v);
  // Tells every visible viewer its pending changes now (hidden ones too when `all`).
  void flush(bool all = false);
  // A viewer was shown: it gets what it missed while hidden.
  void viewerShown(hl::views::InspectorViewer* v);
  // Returns freed heap pages to the system (glibc keeps them otherwise: issue 17 finding 14).
  static void releaseMemory();

 signals:
  void recordingOpened();
  void recordingClosed();
  void recordsAdded(int from);
  void runsUpdated();
  void stepChanged(int step);
  void selectionChanged();
  void viewersUpdated();  // after a flush: the strip and the status bar follow

 private:
  void mark(unsigned what, int from = -1);
  void schedule();
  std::shared_ptr<hl::Recording> rec_;
  std::shared_ptr<const hl::Recording> comparedRec_;
  std::unique_ptr<hl::Run> comparedRun_;
  QString comparedName_;
  int step_ = -1, layer_ = -1, head_ = 0, compareIndex_ = -1;
  bool showDiff_ = false;
  std::vector<hl::DoraRow> dora_;
  std::unique_ptr<hl::views::HiddenPattern> hidden_;
  std::string doraLabel_ = "DoRA";
  hl::views::HardwareInfo hw_;
  const std::vector<std::string>* vocab_ = nullptr;
  uint64_t dataVersion_ = 1;
  struct Slot {
    hl::views::InspectorViewer* viewer;
    unsigned pending;
    int from;
  };
  std::vector<Slot> viewers_;
  QTimer* timer_ = nullptr;
  qint64 lastFlushMs_ = 0;
};

}  // namespace hl::app
