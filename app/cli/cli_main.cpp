// The dispatcher of the headless subcommands: `hybridlens CMD ...`, `--help`, `--version`.
// Turns every exception into exactly one line on stderr and an exit status (trace-format.md §4).
// Not the GUI entry: app/main.cpp decides between the two before any Qt object exists.
#include <sys/stat.h>

#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include "app/cli/args.h"
#include "app/cli/commands.h"
#include "engine/core/error.h"

namespace hl::cli {

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"info", "layer ribbon, parameter counts, dtypes and memory of a checkpoint", runInfo},
      {"trace", "run a checkpoint on tokens and write the trace file (safetensors)", runTrace},
      {"dora", "magnitude / direction change per adapted matrix (adapter or fine-tune vs base), CSV", runDora},
      {"memory", "KV-cache and Mamba-state bytes at a context length (model, all-attention, all-Mamba)", runMemory},
      {"bench", "decode and prefill speed with the instruments on and off", runBench},
      {"record", "run a checkpoint on tokens and write a session file (A, and B with a toggle changed)", runRecord},
      {"sweep", "run every prompt of a JSONL file and write the instruments' distributions over them (stats file)", runSweep},
      {"compare", "per-instrument differences of two runs, token-aligned (two sessions, or A/B of one)", runCompare},
      {"hidden-attention", "the hidden attention of a Mamba-2 layer at one token: each head's row, statistics and strongest keys", runHiddenAttention},
      {"tokenize", "ids and pieces of a text with a checkpoint's tokenizer (tokenizer.json or .model), or decode ids", runTokenize},
#ifdef HL_HAVE_EXPORT  // the Qt build: figures need QCustomPlot (app/gui_cli/cmd_export.cpp)
      {"export", "every figure (PNG/SVG/PDF) and its CSV from a trace or session file, headless", runExport},
#endif
  };
  return table;
}

const Command* findCommand(const std::string& name) {
  for (const auto& c : commands())
    if (name == c.name) return &c;
  return nullptr;
}

namespace {

bool isDirectory(const char* path) {
  struct stat st {};
  return ::stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

bool endsWith(const std::string& s, const char* suffix) {
  const std::string x = suffix;
  return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
}

// The desktop app's own options (app/gui_main.cpp parses them); everything else starting with
// "--" is a mistyped command-line option and gets the CLI's message.
constexpr const char* kGuiOptions[] = {"--checkpoint", "--session", "--adapter", "--prompt",
                                       "--screenshot", "--compare-normalizer", "--theme", "--steps",
                                       "--stats",      "--tour"};

bool isGuiOption(const std::string& a) {
  for (const char* o : kGuiOptions) {
    const std::string n = o;
    if (a == n || a.rfind(n + "=", 0) == 0) return true;
  }
  return false;
}

// One line: newlines and other control characters in a message become spaces.
std::string oneLine(std::string s) {
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

void printError(const std::string& where, const std::string& message) {
  std::string line = "hybridlens" + (where.empty() ? std::string() : " " + where) + ": " + oneLine(message) + "\n";
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
}

void printHelp() {
  std::string s =
      "usage: hybridlens [DIR | FILE.hlsession | FILE.hlstats] [app options]   open the desktop app\n"
      "       hybridlens COMMAND [options]            run a headless command (no display needed)\n"
      "       hybridlens COMMAND --help               options of a command\n"
      "       hybridlens --version\n\ncommands:\n";
  for (const auto& c : commands()) {
    std::string name = c.name;
    s += "  " + name + std::string(name.size() < 10 ? 10 - name.size() : 1, ' ') + c.summary + "\n";
  }
  s +=
      "\napp options:\n"
      "  --checkpoint DIR          open this checkpoint folder or GGUF file (same as giving it)\n"
      "  --session FILE            open a saved session (same as giving FILE.hlsession)\n"
      "  --stats FILE              open a sweep stats file (same as giving FILE.hlstats)\n"
      "  --adapter DIR             load a PEFT LoRA/DoRA adapter with the checkpoint\n"
      "  --prompt TEXT             put TEXT in the prompt editor\n"
      "  --compare-normalizer N    run B with normalizer N (softmax, softmax1, sink)\n"
      "  --theme light|dark        colour theme (remembered otherwise)\n"
      "  --tour ID                 play a guided-tour stop of the bundled demo models (their tour.json)\n"
      "  --steps N --screenshot F  step N tokens, save a screenshot of the window to F and quit\n"
      "  -platform NAME, -style S  Qt's own options (e.g. -platform offscreen)\n";
  s += "\nEvery command exits 0 on success, and non-zero with one line on stderr on failure.\n";
  std::fputs(s.c_str(), stdout);
}

}  // namespace

bool isCliInvocation(int argc, char** argv) {
  if (argc < 2) return false;
  const std::string first = argv[1];
  if (first == "--help" || first == "-h" || first == "help" || first == "--version") return true;
  if (findCommand(first)) return true;
  // The GUI's own options: --checkpoint DIR and Qt's single-dash ones (-platform, -style, ...).
  if (isGuiOption(first)) return false;
  if (first.rfind("--", 0) == 0) return true;
  if (endsWith(first, ".hlsession")) return false;
  return !first.empty() && first[0] != '-' && !isDirectory(argv[1]);
}

int cliMain(int argc, char** argv) {
  if (argc < 2) {
    printHelp();
    return 2;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    printHelp();
    return 0;
  }
  if (name == "--version") {
    std::fputs("hybridlens " HL_VERSION "\n", stdout);
    return 0;
  }
  const Command* cmd = findCommand(name);
  if (!cmd && name.rfind("--", 0) == 0) {
    printError("", "unknown option " + name + "; see hybridlens --help");
    return 2;
  }
  if (!cmd) {
    printError("", "unknown command '" + name + "' (and no such folder); see hybridlens --help");
    return 2;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  try {
    return cmd->run(args);
  } catch (const UsageError& e) {
    printError(name, e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    printError(name, "out of memory");
    return 1;
  } catch (const std::exception& e) {
    printError(name, e.what());
    return 1;
  } catch (...) {
    printError(name, "unexpected error");
    return 1;
  }
}

}  // namespace hl::cli
