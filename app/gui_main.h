// The desktop app's entry: parses its own arguments (a checkpoint folder, session or stats file, and the
// options below; Qt's single-dash options pass through) in plain C++ first, so a bad argument or a
// missing display is one line on stderr and not a Qt abort; then creates the QApplication and the
// main window. `--screenshot` drives the window and saves a picture of it (the README's).
#pragma once
#include <string>
#include <vector>

namespace hl::app {

struct GuiArgs {
  std::string checkpoint;           // folder to open at start, or empty
  std::string session;              // .hlsession to open at start, or empty
  std::string stats;                // .hlstats to open at start in the sweep statistics window, or empty
  std::string adapter;              // PEFT adapter folder to load after the checkpoint
  std::string prompt;               // prompt text to start with
  std::string screenshot;           // PNG to write after stepping, then quit
  std::string compareNormalizer;    // with --screenshot: run B with this normalizer
  std::string theme;                // "light", "dark" or empty (the saved one)
  std::string tour;                 // a guided-tour stop of the bundled models to play at start
  int steps = 24;                   // with --screenshot: tokens to step first
  std::vector<std::string> qtArgs;  // argv[0] and the options left to Qt (-platform, -style, ...)
  bool hasPlatform = false;         // -platform given
};

// Throws std::runtime_error with a one-line message on a bad argument.
GuiArgs parseGuiArgs(int argc, char** argv);
int guiMain(int argc, char** argv);

}  // namespace hl::app
