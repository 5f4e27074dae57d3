// App settings and places (see app_settings.h). The bundled-model layout is that of the trainer
// (tools/train/README.md): <root>/<variant>/ checkpoints and <root>/finetunes/<method>/step-N/
// adapters (adapter_config.json) or full fine-tunes (config.json), based on <root>/baseline.
#include "app/app_settings.h"

#include <QApplication>
#include <QDir>
#include <QFileInfo>
#include <QPalette>
#include <QSettings>
#include <QStandardPaths>
#include <QStyle>
#include <QStyleFactory>
#include <algorithm>

#include "engine/backend/backend_registry.h"

namespace hl::app {

QStringList recentList(const char* key) {
  QStringList all = QSettings().value(key).toStringList(), out;
  for (const QString& p : all)
    if (QFileInfo::exists(p) && !out.contains(p)) out << p;
  return out;
}

void addRecent(const char* key, const QString& path) {
  QSettings s;
  QStringList l = s.value(key).toStringList();
  const QString p = QFileInfo(path).absoluteFilePath();
  l.removeAll(p);
  l.prepend(p);
  while (l.size() > kMaxRecent) l.removeLast();
  s.setValue(key, l);
}

void removeRecent(const char* key, const QString& path) {
  QSettings s;
  QStringList l = s.value(key).toStringList();
  l.removeAll(QFileInfo(path).absoluteFilePath());
  s.setValue(key, l);
}

void applyAppTheme(bool dark) {
  if (QStyle* fusion = QStyleFactory::create(QStringLiteral("Fusion"))) QApplication::setStyle(fusion);
  if (!dark) {
    QApplication::setPalette(QApplication::style()->standardPalette());
    return;
  }
  QPalette p;
  const QColor window(45, 46, 50), base(32, 33, 36), text(226, 226, 228), disabled(120, 120, 126);
  p.setColor(QPalette::Window, window);
  p.setColor(QPalette::WindowText, text);
  p.setColor(QPalette::Base, base);
  p.setColor(QPalette::AlternateBase, window);
  p.setColor(QPalette::ToolTipBase, QColor(60, 62, 68));
  p.setColor(QPalette::ToolTipText, text);
  p.setColor(QPalette::Text, text);
  p.setColor(QPalette::Button, window);
  p.setColor(QPalette::ButtonText, text);
  p.setColor(QPalette::BrightText, QColor(255, 90, 90));
  p.setColor(QPalette::Link, QColor(110, 170, 255));
  p.setColor(QPalette::Highlight, QColor(62, 120, 200));
  p.setColor(QPalette::HighlightedText, Qt::white);
  p.setColor(QPalette::PlaceholderText, disabled);
  for (auto role : {QPalette::WindowText, QPalette::Text, QPalette::ButtonText})
    p.setColor(QPalette::Disabled, role, disabled);
  QApplication::setPalette(p);
}

namespace {
bool isCheckpoint(const QString& dir) {
  return QFileInfo::exists(dir + "/config.json");
}
bool isAdapter(const QString& dir) {
  return QFileInfo::exists(dir + "/adapter_config.json");
}

QStringList candidates(const QString& relFromBinary, const QString& relFromSource) {
  QStringList c;
  const QString app = QCoreApplication::applicationDirPath();
  c << QDir::cleanPath(app + "/../share/hybridlens/" + relFromBinary);
  // build/<preset>/hybridlens and build-x/hybridlens, tests in build/<preset>/tests/.
  for (const char* up : {"/../..", "/..", "/../../.."}) c << QDir::cleanPath(app + up + "/" + relFromSource);
#ifdef HL_SOURCE_DIR
  c << QDir::cleanPath(QStringLiteral(HL_SOURCE_DIR) + "/" + relFromSource);
#endif
  return c;
}

QStringList sortedSubdirs(const QString& dir) {
  QStringList l = QDir(dir).entryList(QDir::Dirs | QDir::NoDotAndDotDot);
  std::sort(l.begin(), l.end(), naturalLess);
  return l;
}
}  // namespace

// QCollator's numeric mode needs ICU (without it, as with the POSIX backend, "step-60" sorts
// before "step-7"): digits are compared here as numbers, the rest case-insensitively.
bool naturalLess(const QString& a, const QString& b) {
  int i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i].isDigit() && b[j].isDigit()) {
      int ie = i, je = j;
      while (ie < a.size() && a[ie].isDigit()) ++ie;
      while (je < b.size() && b[je].isDigit()) ++je;
      // Compare the digit runs as numbers of any length: strip leading zeros, then length, then text.
      QStringView da = QStringView(a).mid(i, ie - i), db = QStringView(b).mid(j, je - j);
      while (da.size() > 1 && da[0] == u'0') da = da.mid(1);
      while (db.size() > 1 && db[0] == u'0') db = db.mid(1);
      if (da.size() != db.size()) return da.size() < db.size();
      if (const int c = da.compare(db); c != 0) return c < 0;
      i = ie;
      j = je;
      continue;
    }
    const QChar ca = a[i].toCaseFolded(), cb = b[j].toCaseFolded();
    if (ca != cb) return ca < cb;
    ++i;
    ++j;
  }
  if ((a.size() - i) != (b.size() - j)) return (a.size() - i) < (b.size() - j);
  return a < b;  // equal but for case or leading zeros: a fixed order
}

bool backendIsEmulated(const QString& name) {
  // The backend's device exists only as an emulation (Vulkan on lavapipe): the registry says.
  return hl::backend_is_emulated(name.toStdString());
}

QString backendMenuLabel(const QString& name) {
  if (backendIsEmulated(name))
    return QStringLiteral("%1 (%2)").arg(name,
                                         QString::fromStdString(hl::find_backend(name.toStdString())->describe()));
  return name;
}

QString bundledModelsDir() {
  const QString env = qEnvironmentVariable("HYBRIDLENS_MODELS");
  if (!env.isEmpty() && QFileInfo(env).isDir()) return QFileInfo(env).absoluteFilePath();
  for (const QString& c : candidates(QStringLiteral("models"), QStringLiteral("resources/models")))
    if (QFileInfo(c).isDir() && !bundledModels(c).empty()) return c;
  return QString();
}

QString randomDemoDir() {
  for (const QString& c : candidates(QStringLiteral("demo-random"), QStringLiteral("resources/demo-random")))
    if (isCheckpoint(c)) return c;
  return QString();
}

std::vector<DemoModel> bundledModels(const QString& root) {
  std::vector<DemoModel> out;
  if (root.isEmpty()) return out;
  // Variants: the baseline first.
  QStringList variants = sortedSubdirs(root);
  variants.removeAll(QStringLiteral("finetunes"));
  if (variants.removeAll(QStringLiteral("baseline"))) variants.prepend(QStringLiteral("baseline"));
  for (const QString& v : variants) {
    const QString d = root + "/" + v;
    if (isCheckpoint(d)) out.push_back({DemoModel::Kind::Checkpoint, v, d, QString()});
  }
  const QString base = root + "/baseline";
  const QString ft = root + "/finetunes";
  if (!isCheckpoint(base) || !QFileInfo(ft).isDir()) return out;
  for (const QString& method : sortedSubdirs(ft)) {
    for (const QString& step : sortedSubdirs(ft + "/" + method)) {
      const QString d = ft + "/" + method + "/" + step;
      const QString name = method + "/" + step;
      if (isAdapter(d))
        out.push_back({DemoModel::Kind::Adapter, name, d, base});
      else if (isCheckpoint(d))
        out.push_back({DemoModel::Kind::Tuned, name, d, base});
    }
  }
  return out;
}

QString defaultDemoDir() {
  const QString root = bundledModelsDir();
  if (!root.isEmpty() && isCheckpoint(root + "/baseline")) return root + "/baseline";
  return randomDemoDir();
}

QString autosaveDir() {
  QString dir = QStandardPaths::writableLocation(QStandardPaths::AppLocalDataLocation);
  if (dir.isEmpty()) dir = QDir::tempPath();
  QDir().mkpath(dir);
  return dir + "/autosave";
}

}  // namespace hl::app
