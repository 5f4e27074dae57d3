// The desktop app's entry (see gui_main.h): argument checks before Qt, then the QApplication and
// the main window, opening the checkpoint or session named on the command line, or offering to
// recover an autosave. Not the headless commands: app/main.cpp dispatches those first.
#include "app/gui_main.h"

#include <sys/stat.h>

#include <QApplication>
#include <QBuffer>
#include <QFile>
#include <QStandardPaths>
#include <QTimer>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "app/engine_types.h"
#include "app/main_window.h"
#include "app/run_panel.h"
#include "engine/io/atomic_file.h"
#include "engine/io/config.h"
#include "engine/io/gguf.h"
#include "engine/model/layer_schedule.h"

namespace hl::app {
namespace {

// Qt's own single-dash options that take a value (QGuiApplication / QApplication documentation).
bool qtOptionTakesValue(const std::string& o) {
  static const char* withValue[] = {"-platform",        "-platformpluginpath", "-platformtheme", "-plugin",
                                    "-qwindowgeometry", "-qwindowicon",        "-qwindowtitle",  "-session",
                                    "-style",           "-stylesheet",         "-display",       "-geometry"};
  for (const char* w : withValue)
    if (o == w) return true;
  return false;
}

bool isDirectory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool isFile(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool envSet(const char* name) {
  const char* v = std::getenv(name);
  return v && *v;
}

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Saves the window as a PNG (atomically) and quits: 0 when written.
void grabWindow(MainWindow& w, const QString& out) {
  QByteArray png;  // written atomically: a kill or a full disk leaves the old file or none
  QBuffer buf(&png);
  std::string err;
  if (!buf.open(QIODevice::WriteOnly) || !w.grab().save(&buf, "PNG")) {
    err = out.toStdString() + ": cannot encode the PNG";
  } else {
    try {
      hl::write_file_atomic(QFile::encodeName(out).toStdString(), png.constData(), static_cast<size_t>(png.size()));
    } catch (const std::exception& e) {
      err = e.what();
    }
  }
  const bool ok = err.empty();
  if (ok)
    std::printf("wrote %s\n", qPrintable(out));
  else
    std::fprintf(stderr, "hybridlens: %s\n", err.c_str());
  QCoreApplication::exit(ok ? 0 : 1);
}

// Drives the window for --screenshot: load, step, optionally a run B, grab, quit.
void driveScreenshot(MainWindow& w, const GuiArgs& g) {
  w.setErrorHook([](const QString& title, const QString& message) {
    std::fprintf(stderr, "hybridlens: %s: %s\n", qPrintable(title), qPrintable(QString(message).replace('\n', ' ')));
    QCoreApplication::exit(1);
  });
  w.setDiscardHook([] { return QMessageBox::Discard; });
  const QString out = QString::fromStdString(g.screenshot);
  const int steps = g.steps;
  auto state = std::make_shared<int>(0);  // 0 stepping, 1 run B, 2 done
  const bool tour = !g.tour.empty();  // a tour stop steps, compares and selects by itself
  if (tour) {
    QObject::connect(&w, &MainWindow::tourFinished, &w, [&w, out] {
      QTimer::singleShot(300, &w, [&w, out] { grabWindow(w, out); });
    });
    return;
  }
  QObject::connect(&w, &MainWindow::runStarted, &w, [&w, steps] { w.stepRun(steps); });
  QObject::connect(&w, &MainWindow::idle, &w, [&w, g, out, state] {
    if (w.isBusy() || *state == 2) return;
    if (*state == 0 && !g.compareNormalizer.empty()) {
      *state = 1;
      Toggles t = w.runPanel()->toggles();
      t.normalizerOverride = true;
      hl::parse_normalizer(g.compareNormalizer, &t.normalizer);
      w.setToggles(t);
      return;
    }
    *state = 2;
    const hl::Run* a = w.runA();
    if (a && !a->records.empty()) w.scrubTo(static_cast<int>(a->records.size()) * 2 / 3);
    const hl::LayerSchedule sched = hl::LayerSchedule::from_config(w.recording()->config);
    w.selectLayer(sched.attention_layers().empty() ? 0 : static_cast<int>(sched.attention_layers()[0]));
    w.updateAllViews();
    QTimer::singleShot(300, &w, [&w, out] { grabWindow(w, out); });
  });
}

}  // namespace

GuiArgs parseGuiArgs(int argc, char** argv) {
  GuiArgs g;
  g.qtArgs.emplace_back(argc > 0 ? argv[0] : "hybridlens");
  auto setCheckpoint = [&](const std::string& dir) {
    if (!g.checkpoint.empty()) throw std::runtime_error("more than one checkpoint given");
    if (!isDirectory(dir) && !(isFile(dir) && hl::is_gguf_file(dir)))
      throw std::runtime_error("--checkpoint: '" + dir + "' is neither a checkpoint folder nor a GGUF file");
    g.checkpoint = dir;
  };
  auto setSession = [&](const std::string& file) {
    if (!g.session.empty()) throw std::runtime_error("more than one session file given");
    if (!isFile(file)) throw std::runtime_error("--session: no such file '" + file + "'");
    g.session = file;
  };
  auto setStats = [&](const std::string& file) {
    if (!g.stats.empty()) throw std::runtime_error("more than one stats file given");
    if (!isFile(file)) throw std::runtime_error("--stats: no such file '" + file + "'");
    g.stats = file;
  };
  auto value = [&](int& i, const std::string& name) -> std::string {
    const std::string a = argv[i];
    if (a.size() > name.size() && a.compare(0, name.size() + 1, name + "=") == 0) return a.substr(name.size() + 1);
    if (i + 1 >= argc) throw std::runtime_error("option " + name + " needs a value");
    return argv[++i];
  };
  auto is = [](const std::string& a, const char* name) {
    const std::string n = name;
    return a == n || a.rfind(n + "=", 0) == 0;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (is(a, "--checkpoint")) {
      setCheckpoint(value(i, "--checkpoint"));
    } else if (is(a, "--session")) {
      setSession(value(i, "--session"));
    } else if (is(a, "--stats")) {
      setStats(value(i, "--stats"));
    } else if (is(a, "--adapter")) {
      g.adapter = value(i, "--adapter");
      if (!isDirectory(g.adapter)) throw std::runtime_error("--adapter: no such folder '" + g.adapter + "'");
    } else if (is(a, "--prompt")) {
      g.prompt = value(i, "--prompt");
    } else if (is(a, "--screenshot")) {
      g.screenshot = value(i, "--screenshot");
    } else if (is(a, "--compare-normalizer")) {
      g.compareNormalizer = value(i, "--compare-normalizer");
      hl::Normalizer n;
      if (!hl::parse_normalizer(g.compareNormalizer, &n))
        throw std::runtime_error("--compare-normalizer: expected softmax, softmax1 or sink");
    } else if (is(a, "--tour")) {
      g.tour = value(i, "--tour");
      if (g.tour.empty() || g.tour.size() > 48) throw std::runtime_error("--tour: expected the id of a tour stop (resources/models/tour.json)");
    } else if (is(a, "--theme")) {
      g.theme = value(i, "--theme");
      if (g.theme != "light" && g.theme != "dark") throw std::runtime_error("--theme: expected light or dark");
    } else if (is(a, "--steps")) {
      const std::string v = value(i, "--steps");
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end || n < 1 || n > 100000) throw std::runtime_error("--steps: expected 1 to 100000");
      g.steps = static_cast<int>(n);
    } else if (a.rfind("--", 0) == 0) {
      throw std::runtime_error("unknown option " + a + " (see hybridlens --help)");
    } else if (a.size() > 1 && a[0] == '-') {
      g.qtArgs.emplace_back(a);
      if (a == "-platform") g.hasPlatform = true;
      if (qtOptionTakesValue(a)) {
        if (i + 1 >= argc) throw std::runtime_error("option " + a + " needs a value");
        g.qtArgs.emplace_back(argv[++i]);
      }
    } else if (endsWith(a, ".hlsession")) {
      setSession(a);
    } else if (endsWith(a, ".hlstats")) {
      setStats(a);
    } else {
      setCheckpoint(a);
    }
  }
  if (!g.screenshot.empty() && g.checkpoint.empty() && g.tour.empty())
    throw std::runtime_error("--screenshot needs a checkpoint (folder or GGUF file) to step, or --tour");
  if (!g.tour.empty() && (!g.checkpoint.empty() || !g.session.empty()))
    throw std::runtime_error("--tour opens its own model: give it without a checkpoint or session");
  return g;
}

int guiMain(int argc, char** argv) {
  GuiArgs g;
  try {
    g = parseGuiArgs(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hybridlens: %s\n", e.what());
    return 2;
  }
#ifdef __linux__
  if (!g.hasPlatform && !envSet("QT_QPA_PLATFORM") && !envSet("DISPLAY") && !envSet("WAYLAND_DISPLAY")) {
    std::fputs(
        "hybridlens: no display (DISPLAY is not set): start it in a desktop session or under xvfb-run, "
        "or run a headless command (hybridlens --help)\n",
        stderr);
    return 1;
  }
#endif

  // QApplication keeps references to argc and argv: both live until the end of this function.
  std::vector<char*> qtArgv;
  for (auto& s : g.qtArgs) qtArgv.push_back(s.data());
  qtArgv.push_back(nullptr);
  int qtArgc = static_cast<int>(g.qtArgs.size());
  QApplication app(qtArgc, qtArgv.data());
  QApplication::setApplicationName("HybridLens");
  // A screenshot run keeps its settings (recent lists, layout) apart from the user's.
  QApplication::setOrganizationName(g.screenshot.empty() ? "HybridLens" : "HybridLens-screenshot");
  QApplication::setApplicationVersion(HL_VERSION);
  QApplication::setWindowIcon(QIcon(QStringLiteral(":/hybridlens/hybridlens.svg")));
  if (!g.screenshot.empty()) QStandardPaths::setTestModeEnabled(true);

  MainWindow window;
  // Fault tests (tools/kill_anywhere.sh): autosave every HL_AUTOSAVE_MS instead of every 20 s.
  if (const char* ms = std::getenv("HL_AUTOSAVE_MS"); ms && std::atoi(ms) > 0) window.setAutosaveInterval(std::atoi(ms));
  if (!g.theme.empty()) window.setDarkTheme(g.theme == "dark");
  if (!g.prompt.empty()) {
    window.runPanel()->setIdsMode(false);
    window.runPanel()->setPromptText(QString::fromStdString(g.prompt));
  }
  if (!g.screenshot.empty()) {
    // HL_SCREENSHOT_SIZE=WxH (tools/screenshot.sh) checks the laptop layout; 1920 x 1200 otherwise.
    const QStringList wh = qEnvironmentVariable("HL_SCREENSHOT_SIZE").split('x');
    const int w = wh.size() == 2 ? wh[0].toInt() : 0, h = wh.size() == 2 ? wh[1].toInt() : 0;
    window.resize(w >= 640 && w <= 7680 ? w : 1920, h >= 480 && h <= 4320 ? h : 1200);
    driveScreenshot(window, g);
  }
  window.show();
  const QString checkpoint = QString::fromStdString(g.checkpoint);
  const QString session = QString::fromStdString(g.session);
  const QString adapter = QString::fromStdString(g.adapter);
  const bool screenshot = !g.screenshot.empty();
  const QString stats = QString::fromStdString(g.stats);
  const QString tour = QString::fromStdString(g.tour);
  QTimer::singleShot(0, &window, [&window, checkpoint, session, adapter, screenshot, stats, tour] {
    if (!stats.isEmpty()) window.openStats(stats);  // its own window: independent of the model and session
    if (!tour.isEmpty() && !window.playTour(tour)) {
      std::fprintf(stderr, "hybridlens: --tour: no stop '%s' in the bundled models' tour.json\n", qPrintable(tour));
      QCoreApplication::exit(2);
      return;
    }
    if (!adapter.isEmpty()) {
      QObject::connect(
          &window, &MainWindow::modelLoaded, &window, [&window, adapter] { window.loadAdapter(adapter); },
          Qt::SingleShotConnection);
    }
    if (!checkpoint.isEmpty() && !session.isEmpty()) {
      // The session continues on this checkpoint once it is loaded.
      QObject::connect(
          &window, &MainWindow::runStarted, &window, [&window, session] { window.openSession(session); },
          Qt::SingleShotConnection);
    }
    if (!checkpoint.isEmpty())
      window.openCheckpoint(checkpoint);
    else if (!session.isEmpty())
      window.openSession(session);
    if (!screenshot) window.offerRecovery();  // after a crash: offer the autosave (non-modal)
  });
  return QApplication::exec();
}

}  // namespace hl::app
