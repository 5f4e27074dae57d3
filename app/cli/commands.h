// The headless subcommands of `hybridlens` (trace-format.md §3–§4): the dispatcher's table and
// one entry point per command. Plain C++ on the engine: nothing here touches Qt or a display.
// Each command returns its exit status; failures are thrown and printed by cliMain on one line.
#pragma once
#include <string>
#include <vector>

namespace hl::cli {

struct Command {
  const char* name;
  const char* summary;                               // one line for `hybridlens --help`
  int (*run)(const std::vector<std::string>& args);  // args after the command name
};

// Every command, in the order `hybridlens --help` lists them.
const std::vector<Command>& commands();
const Command* findCommand(const std::string& name);

// True when argv asks for the command line rather than the GUI: a known command, --help, -h,
// --version, a double-dash option other than the GUI's --checkpoint, or a first argument that is
// neither an option nor an existing folder (so a misspelled command gets a one-line error
// instead of a window).
bool isCliInvocation(int argc, char** argv);
// Runs argv[1] as a command; prints errors as one line on stderr. 0 ok, 1 failed, 2 bad usage.
int cliMain(int argc, char** argv);

int runInfo(const std::vector<std::string>& args);
int runTrace(const std::vector<std::string>& args);
int runDora(const std::vector<std::string>& args);
int runMemory(const std::vector<std::string>& args);
int runBench(const std::vector<std::string>& args);
int runRecord(const std::vector<std::string>& args);
int runCompare(const std::vector<std::string>& args);
int runTokenize(const std::vector<std::string>& args);
int runHiddenAttention(const std::vector<std::string>& args);
int runSweep(const std::vector<std::string>& args);
int runExport(const std::vector<std::string>& args);  // app/gui_cli/cmd_export.cpp, with HL_HAVE_EXPORT

}  // namespace hl::cli
