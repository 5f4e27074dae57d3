// The desktop app's entry: parses its own arguments (`DIR`, `--checkpoint DIR`, Qt's single-dash
// options) in plain C++ first, so a bad argument or a missing display is one line on stderr and
// not a Qt abort; then creates the QApplication and the main window.
#pragma once
#include <string>
#include <vector>

namespace hl::app {

struct GuiArgs {
  std::string checkpoint;           // folder to open at start, or empty
  std::vector<std::string> qtArgs;  // argv[0] and the options left to Qt (-platform, -style, ...)
  bool hasPlatform = false;         // -platform given
};

// Throws std::runtime_error with a one-line message on a bad argument.
GuiArgs parseGuiArgs(int argc, char** argv);
int guiMain(int argc, char** argv);

}  // namespace hl::app
