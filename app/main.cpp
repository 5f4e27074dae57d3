// The one `hybridlens` executable: a subcommand (or --help / --version) runs headless in plain
// C++ and never creates a Qt application; otherwise the desktop app opens (when it was built).
// See app/cli/commands.h for the commands and app/gui_main.h for the GUI's own arguments.
#include <cstdio>

#include "app/cli/commands.h"
#include "engine/core/record_heap.h"
#ifdef HL_HAVE_GUI
#include "app/gui_main.h"
#endif

int main(int argc, char** argv) {
  hl::keep_record_memory_in_heap();  // before any thread: a run's records reuse freed memory
  if (hl::cli::isCliInvocation(argc, argv)) return hl::cli::cliMain(argc, argv);
#ifdef HL_HAVE_GUI
  return hl::app::guiMain(argc, argv);
#else
  std::fputs(
      "hybridlens: the GUI was not built (configured with HL_BUILD_GUI=OFF); run a command, see hybridlens --help\n",
      stderr);
  return 2;
#endif
}
