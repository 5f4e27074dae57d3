// The desktop app's entry (see gui_main.h): argument checks before Qt, then the QApplication and
// the main window, opening the checkpoint named on the command line.
// Not the headless commands: those never reach this file (app/main.cpp dispatches first).
#include "app/gui_main.h"

#include <sys/stat.h>

#include <QApplication>
#include <QTimer>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "app/main_window.h"

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

bool envSet(const char* name) {
  const char* v = std::getenv(name);
  return v && *v;
}

}  // namespace

GuiArgs parseGuiArgs(int argc, char** argv) {
  GuiArgs g;
  g.qtArgs.emplace_back(argc > 0 ? argv[0] : "hybridlens");
  auto setCheckpoint = [&](const std::string& dir) {
    if (!g.checkpoint.empty()) throw std::runtime_error("more than one checkpoint folder given");
    if (!isDirectory(dir)) throw std::runtime_error("--checkpoint: no such folder '" + dir + "'");
    g.checkpoint = dir;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--checkpoint") {
      if (i + 1 >= argc) throw std::runtime_error("option --checkpoint needs a value DIR");
      setCheckpoint(argv[++i]);
    } else if (a.rfind("--checkpoint=", 0) == 0) {
      setCheckpoint(a.substr(13));
    } else if (a.rfind("--", 0) == 0) {
      throw std::runtime_error("unknown option " + a + " (see hybridlens --help)");
    } else if (a.size() > 1 && a[0] == '-') {
      g.qtArgs.emplace_back(a);
      if (a == "-platform") g.hasPlatform = true;
      if (qtOptionTakesValue(a)) {
        if (i + 1 >= argc) throw std::runtime_error("option " + a + " needs a value");
        g.qtArgs.emplace_back(argv[++i]);
      }
    } else {
      setCheckpoint(a);
    }
  }
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
  QApplication::setOrganizationName("HybridLens");
  QApplication::setApplicationVersion(HL_VERSION);

  MainWindow window;
  window.show();
  if (!g.checkpoint.empty()) {
    const QString dir = QString::fromStdString(g.checkpoint);
    QTimer::singleShot(0, &window, [&window, dir] { window.openCheckpoint(dir); });
  }
  return QApplication::exec();
}

}  // namespace hl::app
