// Helpers of the offscreen GUI tests: generated demo checkpoints in a temp folder, waiting on the
// event loop for a condition (never a fixed sleep), and a main window wired with non-modal hooks
// that record errors and answer the unsaved-work question.
#pragma once
#include <unistd.h>

#include <QApplication>
#include <QCheckBox>
#include <QElapsedTimer>
#include <QMenu>
#include <QMenuBar>
#include <QString>
#include <QStringList>
#include <filesystem>
#include <fstream>
#include <functional>
#include <tuple>
#include <memory>
#include <string>

#include "app/main_window.h"
#include "app/run_panel.h"
#include "engine/io/safetensors.h"
#include "engine/model/generator.h"

namespace hl::test {

namespace fs = std::filesystem;

// Runs the event loop until `done` or `ms`.
template <typename Pred>
bool waitFor(Pred done, int ms = 60000) {
  QElapsedTimer t;
  t.start();
  while (!done() && t.elapsed() < ms)
    QApplication::processEvents(QEventLoop::AllEvents | QEventLoop::WaitForMoreEvents, 20);
  return done();
}

// A temp folder removed at exit.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag) {
    path = fs::temp_directory_path() / ("hl_gui_" + tag + "_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  QString q(const std::string& rel = "") const {
    return QString::fromStdString((rel.empty() ? path : path / rel).string());
  }
};

// demo-random (8 layers: attention at i % 4 == 2, MoE on odd layers, no tokenizer) into `dir`.
inline void makeDemo(const fs::path& dir, uint64_t seed = 0) {
  hl::GenerateOptions o;
  o.config = hl::preset_config("demo-random");
  o.seed = seed;
  hl::generate_checkpoint(dir.string(), o);
}

// A main window whose errors are collected (no dialog) and whose unsaved-work question answers
// `answer` (Discard unless a test changes it).
struct Harness {
  std::unique_ptr<hl::app::MainWindow> w = std::make_unique<hl::app::MainWindow>();
  QStringList errors;  // "title: message"
  QMessageBox::StandardButton answer = QMessageBox::Discard;
  int asked = 0;
  Harness() {
    w->setErrorHook([this](const QString& t, const QString& m) { errors << t + ": " + m; });
    w->setDiscardHook([this] {
      ++asked;
      return answer;
    });
    w->show();
  }
  hl::app::MainWindow* operator->() const { return w.get(); }

  // Opens `dir` with token ids `ids` as the prompt; waits for the model and the fresh run A.
  bool load(const QString& dir, const QString& ids = QStringLiteral("1, 5, 9, 13"));
  // Steps n tokens (n < 0: to the end) and waits until the engine is idle again.
  bool step(int64_t n);
  // Waits until no engine command is pending.
  bool settle() {
    return waitFor([&] { return !w->isBusy() && !w->isLoading(); });
  }
  size_t records() const { return w->runA() ? w->runA()->records.size() : 0; }
};

inline bool Harness::load(const QString& dir, const QString& ids) {
  w->runPanel()->setIdsMode(true);
  w->runPanel()->setPromptText(ids);
  bool loaded = false, failed = false, started = false;
  auto c1 = QObject::connect(w.get(), &hl::app::MainWindow::modelLoaded, [&] { loaded = true; });
  auto c2 = QObject::connect(w.get(), &hl::app::MainWindow::loadFailed, [&] { failed = true; });
  auto c3 = QObject::connect(w.get(), &hl::app::MainWindow::runStarted, [&] { started = true; });
  const bool ok = w->openCheckpoint(dir) && waitFor([&] { return started || failed; }) && loaded && started;
  QObject::disconnect(c1);
  QObject::disconnect(c2);
  QObject::disconnect(c3);
  return ok && settle();
}

inline bool Harness::step(int64_t n) {
  bool idle = false;
  auto c = QObject::connect(w.get(), &hl::app::MainWindow::idle, [&] { idle = true; });
  const bool ok = w->stepRun(n) && waitFor([&] { return idle; });
  QObject::disconnect(c);
  return ok && settle();
}

// Saves the session of `h` to `path` and waits for it.
inline bool save(Harness& h, const QString& path) {
  bool saved = false;
  auto c = QObject::connect(h.w.get(), &hl::app::MainWindow::sessionSaved, [&] { saved = true; });
  const bool ok = h->saveSession(path) && waitFor([&] { return saved || !h.errors.isEmpty(); });
  QObject::disconnect(c);
  return ok && saved;
}

// One demo checkpoint for every test of the process (ctest runs each test in its own): the temp
// folder holding it as "demo-random", made on first use and removed at exit.
inline const TempDir& demo() {
  static const TempDir d("demo");
  static const bool made = (makeDemo(d.path / "demo-random"), true);
  (void)made;
  return d;
}
inline QString demoDir() {
  return demo().q("demo-random");
}

// A PEFT DoRA adapter on the first attention layer's q_proj and o_proj of demo-random.
inline void writeDoraAdapter(const fs::path& dir) {
  const hl::JambaConfig c = hl::preset_config("demo-random");
  const int64_t H = c.hidden_size, Q = c.num_attention_heads * c.head_dim(), r = 4;
  const std::string layer = "model.layers." + std::to_string(c.attn_layer_offset) + ".self_attn.";
  fs::create_directories(dir);
  std::ofstream((dir / "adapter_config.json").string())
      << R"({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "use_dora": true, "target_modules": ["q_proj", "o_proj"]})";
  hl::SafetensorsWriter w;
  uint32_t seed = 12345;
  auto values = [&](int64_t n, float scale, float offset) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) {
      seed = seed * 1664525u + 1013904223u;
      x = offset + scale * (static_cast<float>(seed >> 8) / 16777216.0f - 0.5f);
    }
    return v;
  };
  for (auto [module, out, in] : {std::tuple{"q_proj", Q, H}, std::tuple{"o_proj", H, Q}}) {
    const std::string p = "base_model.model." + layer + module;
    w.add_float(p + ".lora_A.weight", hl::DType::F32, {r, in}, values(r * in, 0.2f, 0).data());
    w.add_float(p + ".lora_B.weight", hl::DType::F32, {out, r}, values(out * r, 0.2f, 0).data());
    w.add_float(p + ".lora_magnitude_vector", hl::DType::F32, {out}, values(out, 0.5f, 1.0f).data());
  }
  w.write((dir / "adapter_model.safetensors").string());
}

// Ticks the run panel's "ignore EOS", so that stepping n tokens gives n tokens.
inline void ignoreEos(Harness& h) {
  h->runPanel()->findChild<QCheckBox*>("ignoreEos")->setChecked(true);
}

// The window's File > Open demo model menu, or null.
inline QMenu* demoMenuOf(Harness& h) {
  for (QAction* a : h->menuBar()->actions()[0]->menu()->actions())
    if (a->menu() && a->text().contains("demo")) return a->menu();
  return nullptr;
}
// A window opened with HYBRIDLENS_MODELS=`models` (unset again once the window has built its menus).
inline std::unique_ptr<Harness> harnessWithModels(const fs::path& models) {
  ::setenv("HYBRIDLENS_MODELS", models.c_str(), 1);
  auto h = std::make_unique<Harness>();
  ::unsetenv("HYBRIDLENS_MODELS");
  return h;
}

// Changes the run panel's toggles as the user would and waits for the compare run it starts
// (compareChanged, then idle). False when it did not come.
inline bool toggle(Harness& h, const std::function<void(hl::app::Toggles&)>& change) {
  bool changed = false;
  auto c = QObject::connect(h.w.get(), &hl::app::MainWindow::compareChanged, [&] { changed = true; });
  hl::app::Toggles t = h->runPanel()->toggles();
  change(t);
  h->setToggles(t);
  const bool ok = waitFor([&] { return changed && !h->isBusy(); });
  QObject::disconnect(c);
  return ok;
}

}  // namespace hl::test
