// `hybridlens export` (trace-format.md §4): every figure the data allows, headless. Reads a trace
// file (sessions/trace_import.h; heatmaps need a --full trace) or a session file, optionally DoRA
// rows, and writes <out>/<view>.<format> plus <out>/<view>.csv through the views' own export
// (views/figure_export.h) on Qt's offscreen platform. Needs the Qt build (HL_BUILD_GUI).
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <QApplication>
#include <QDir>
#include <QStringList>

#include "app/cli/args.h"
#include "app/cli/commands.h"
#include "engine/core/error.h"
#include "engine/io/config.h"
#include "engine/io/json_util.h"
#include "engine/probes/dora_probe.h"
#include "engine/tokenizer/tokenizer.h"
#include "sessions/session_file.h"
#include "sessions/trace_import.h"
#include "views/figure_export.h"
#include "views/view_registry.h"

namespace hl::cli {
namespace {

ArgParser exportParser() {
  ArgParser p("export",
              "(--trace FILE [--dora FILE.csv] | --session FILE) --out DIR [--format png|svg|pdf]\n"
              "       [--width PX --height PX --dpi N] [--checkpoint DIR|FILE.gguf] [--step T] [--layer L] [--head H]\n"
              "       [--views ID,ID] [--dark] [--no-csv]",
              "Writes every figure the data allows (heatmaps need a --full trace or a session) and each\n"
              "view's data as CSV into a folder, without a display (Qt offscreen platform).");
  p.option("trace", "FILE", "trace file written by `hybridlens trace` (.safetensors)")
      .option("session", "FILE", "session file (.hlsession); run A = first run, B = second when present")
      .option("dora", "FILE", "DoRA rows written by `hybridlens dora` (CSV) for the DoRA view")
      .option("checkpoint", "DIR", "checkpoint of the trace: exact config.json and token text (optional)")
      .option("out", "DIR", "folder to write into (created if missing)", true)
      .option("format", "FMT", "png (default), svg or pdf; several comma-separated")
      .option("width", "PX", "figure width in pixels (default 1200)")
      .option("height", "PX", "figure height in pixels (default 800)")
      .option("dpi", "N", "dots per inch (default 150)")
      .option("step", "T", "token the figures show (default: the last)")
      .option("layer", "L", "selected layer (attention pattern, SSM Δ, router views)")
      .option("head", "H", "selected attention head (default 0)")
      .option("views", "IDS",
              "only these views, comma-separated (ribbon,entropy,attention,rank1,ssm_delta,\n"
              "                     router,memory,dora,outliers,latency,candidates)")
      .flag("dark", "dark theme")
      .flag("no-csv", "figures only");
  return p;
}

// QApplication for the command: the offscreen platform unless the user chose one.
QApplication* ensureApp() {
  if (auto* app = qobject_cast<QApplication*>(QCoreApplication::instance())) return app;
  if (std::getenv("QT_QPA_PLATFORM") == nullptr) ::setenv("QT_QPA_PLATFORM", "offscreen", 1);
  // A headless command reports its own errors in one line; Qt's notes about the environment
  // (XDG_RUNTIME_DIR, fonts) are not the user's concern here. Critical and fatal messages stay.
  qInstallMessageHandler([](QtMsgType type, const QMessageLogContext&, const QString& msg) {
    if (type == QtCriticalMsg || type == QtFatalMsg) std::fprintf(stderr, "%s\n", qPrintable(msg));
  });
  static int argc = 1;
  static char arg0[] = "hybridlens";
  static char* argv[] = {arg0, nullptr};
  static QApplication app(argc, argv);
  return &app;
}

QStringList splitList(const std::string& s) {
  QStringList out;
  for (const QString& x : QString::fromStdString(s).split(',', Qt::SkipEmptyParts)) out << x.trimmed().toLower();
  return out;
}

}  // namespace

int runExport(const std::vector<std::string>& args) {
  ArgParser p = exportParser();
  ParsedArgs a = p.parse(args);
  if (a.helpRequested()) {
    std::fputs(p.usage().c_str(), stdout);
    return 0;
  }
  requireOneOf(a, "trace", "session", "give --trace FILE or --session FILE");
  if (a.has("checkpoint") && !a.has("trace")) throw UsageError("--checkpoint applies to --trace only");
  views::FigureExportOptions o;
  o.dir = QString::fromStdString(a.get("out"));
  if (o.dir.isEmpty()) throw UsageError("--out: empty folder name");
  o.formats = splitList(a.getOr("format", "png"));
  if (o.formats.isEmpty()) throw UsageError("--format: expected png, svg or pdf");
  for (const QString& f : o.formats)
    if (f != "png" && f != "svg" && f != "pdf")
      throw UsageError("--format: expected png, svg or pdf, got '" + f.toStdString() + "'");
  o.width = static_cast<int>(a.getIntOr("width", 1200, 64, 16384));
  o.height = static_cast<int>(a.getIntOr("height", 800, 64, 16384));
  o.dpi = static_cast<double>(a.getIntOr("dpi", 150, 36, 2400));
  o.csv = !a.has("no-csv");
  o.dark = a.has("dark");
  if (a.has("views")) {
    o.only = splitList(a.get("views"));
    for (const QString& id : o.only)
      if (!views::viewIds().contains(id))
        throw UsageError("--views: unknown view '" + id.toStdString() +
                         "' (known: " + views::viewIds().join(',').toStdString() + ")");
  }

  // The data.
  Recording rec;
  std::vector<std::string> vocab;
  if (a.has("trace")) {
    TraceImportOptions io;
    JambaConfig cfg;
    std::unique_ptr<Tokenizer> tok;
    if (a.has("checkpoint")) {
      const std::string dir = a.get("checkpoint");
      cfg = load_config_file(dir + "/config.json");
      io.config = &cfg;
      tok = load_tokenizer_for(dir);  // tokenizer.json, else tokenizer.model, else none
    }
    rec = import_trace(a.get("trace"), io);
    if (tok) {
      rec.token_text = display_pieces(*tok, rec.tokens);
      vocab.reserve(static_cast<size_t>(tok->vocab_size()));
      for (int64_t i = 0; i < tok->vocab_size(); ++i) vocab.push_back(tok->piece(static_cast<int32_t>(i)));
    }
  } else {
    rec = load_session(a.get("session"));
    if (rec.runs.empty()) throw LoadError(a.get("session") + ": the session has no run");
  }
  std::vector<DoraRow> dora;
  if (a.has("dora")) {
    const std::string path = a.get("dora");
    dora = parse_dora_csv(read_file_limited(path, kMaxDoraCsvBytes, "DoRA CSV"), path);
  }

  views::ViewState s;
  s.rec = &rec;
  s.a = &rec.runs[0];
  s.b = rec.runs.size() > 1 ? &rec.runs[1] : nullptr;
  s.step = static_cast<int>(a.getIntOr("step", -1, -1, int64_t{1} << 30));
  s.layer = static_cast<int>(a.getIntOr("layer", -1, -1, rec.config.num_hidden_layers - 1));
  s.head = static_cast<int>(a.getIntOr("head", 0, 0, std::max<int64_t>(0, rec.config.num_attention_heads - 1)));
  s.dora = dora.empty() ? nullptr : &dora;
  if (!vocab.empty()) s.vocab = &vocab;
  if (s.step >= 0 && (s.a->records.empty() || s.step >= static_cast<int>(s.a->records.size())))
    throw UsageError("--step: " + std::to_string(s.step) + " is outside the recorded tokens [0, " +
                     std::to_string(s.a->records.size()) + ")");

  ensureApp();
  const views::FigureExportResult r = views::exportFigures(s, o);
  if (!r.errors.isEmpty()) throw Error(r.errors.front().toStdString());
  std::printf("wrote %lld files to %s\n", static_cast<long long>(r.written.size()),
              QDir(o.dir).absolutePath().toStdString().c_str());
  for (const QString& sk : r.skipped) std::printf("skipped %s\n", sk.toStdString().c_str());
  return 0;
}

}  // namespace hl::cli
