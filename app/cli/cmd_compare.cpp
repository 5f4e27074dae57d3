// `hybridlens compare A B [--json]` (trace-format.md §4, issue 6): per-instrument differences of two
// runs, token-aligned — max and mean |Δ| per trace tensor over the common token prefix, the first
// differing token, logits top-1 agreement. One file: its runs A and B. The math: sessions/compare.h.
#include <cstdio>
#include <string>
#include <vector>

#include "app/cli/args.h"
#include "app/cli/commands.h"
#include "engine/core/error.h"
#include "engine/io/safetensors.h"
#include "sessions/compare.h"
#include "sessions/session_file.h"

namespace hl::cli {
namespace {

ArgParser compareParser() {
  ArgParser p("compare", "SESSION_A [SESSION_B] [--run-a LABEL] [--run-b LABEL] [--json]",
              "Compares two runs token by token: for every trace tensor the largest and mean |difference| over\n"
              "the common token prefix and the first token where they differ, and how often the logits agree\n"
              "on the top-1 token. With two files: the first run of each (or --run-a / --run-b). With one\n"
              "file: its first two runs (e.g. A and B of `hybridlens record --compare-normalizer`).");
  p.option("run-a", "LABEL", "run of the first session (default: its first run)")
      .option("run-b", "LABEL", "run of the second session (default: its first run; one file: its second run)")
      .flag("json", "print one JSON object instead of the table");
  return p;
}

const Run& pickRun(const Recording& rec, const std::string& file, const std::string& label, size_t fallback) {
  if (!label.empty()) {
    if (const Run* r = rec.run(label)) return *r;
    std::string have;
    for (const Run& r : rec.runs) have += (have.empty() ? "" : ", ") + r.label;
    throw Error(file + ": no run labelled '" + label + "' (runs: " + (have.empty() ? "none" : have) + ")");
  }
  if (fallback >= rec.runs.size()) {
    throw Error(file + ": has " + std::to_string(rec.runs.size()) + " run(s); comparing within one file needs two");
  }
  return rec.runs[fallback];
}

}  // namespace

int runCompare(const std::vector<std::string>& args) {
  // The session files are positional; everything else goes through the option parser.
  std::vector<std::string> files, options;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& s = args[i];
    if (s.rfind("--", 0) == 0 || s == "-h") {
      options.push_back(s);
      if ((s == "--run-a" || s == "--run-b") && i + 1 < args.size()) options.push_back(args[++i]);
    } else {
      files.push_back(s);
    }
  }
  ArgParser p = compareParser();
  ParsedArgs a = p.parse(options);
  if (a.helpRequested()) {
    std::fputs(p.usage().c_str(), stdout);
    return 0;
  }
  if (files.empty() || files.size() > 2) {
    throw UsageError("expected one or two session files, got " + std::to_string(files.size()) +
                     " (see hybridlens compare --help)");
  }
  const Recording ra = load_session(files[0]);
  const Recording rb = files.size() == 2 ? load_session(files[1]) : Recording();
  const Recording& second = files.size() == 2 ? rb : ra;
  const std::string fa = base_name(files[0]), fb = base_name(files.back());
  const Run& runA = pickRun(ra, fa, a.getOr("run-a", ""), 0);
  const Run& runB = pickRun(second, fb, a.getOr("run-b", ""), files.size() == 2 ? 0 : 1);
  RunComparison c = compare_runs(runA, runB);
  if (files.size() == 2) {
    c.warnings = recording_differences(ra, rb);
    if (a.has("json"))  // the table prints them itself
      for (const std::string& w : c.warnings) std::fprintf(stderr, "hybridlens compare: warning: %s\n", w.c_str());
  }
  const std::string na = fa + ":" + runA.label, nb = fb + ":" + runB.label;
  const std::string text = a.has("json") ? comparison_json(c, na, nb) : comparison_text(c, na, nb);
  std::fputs(text.c_str(), stdout);
  return 0;
}

}  // namespace hl::cli
