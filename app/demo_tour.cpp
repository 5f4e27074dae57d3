// The guided tour's file (resources/docs/demo-tour.md): read with checked sizes, one-line errors.
#include "app/demo_tour.h"

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRegularExpression>
#include <QSet>

#include "engine/core/error.h"

namespace hl::app {
namespace {

constexpr qint64 kMaxFileBytes = 1 << 20;
constexpr int kMaxStops = 64;

[[noreturn]] void fail(const QString& path, const QString& where, const QString& what) {
  throw hl::LoadError((path + ": " + (where.isEmpty() ? QString() : where + ": ") + what).toStdString());
}

// A string field: present when `required`, at most `maxLen` characters, one line.
QString text(const QJsonObject& o, const char* key, int maxLen, bool required, const QString& path,
             const QString& where) {
  const QJsonValue v = o.value(QLatin1String(key));
  if (v.isUndefined()) {
    if (required) fail(path, where, QStringLiteral("'%1' is missing").arg(key));
    return QString();
  }
  if (!v.isString()) fail(path, where, QStringLiteral("'%1' must be a string").arg(key));
  const QString s = v.toString();
  if ((required && s.trimmed().isEmpty()) || s.size() > maxLen)
    fail(path, where, QStringLiteral("'%1' must have 1 to %2 characters (has %3)").arg(key).arg(maxLen).arg(s.size()));
  if (s.contains('\n') || s.contains('\r')) fail(path, where, QStringLiteral("'%1' must be one line").arg(key));
  return s;
}

// An integer field in [lo, hi], or `def` when absent.
int integer(const QJsonObject& o, const char* key, int lo, int hi, int def, const QString& path, const QString& where) {
  const QJsonValue v = o.value(QLatin1String(key));
  if (v.isUndefined()) return def;
  const double d = v.toDouble(-1e300);
  if (!v.isDouble() || d != static_cast<double>(static_cast<long long>(d)) || d < lo || d > hi)
    fail(path, where, QStringLiteral("'%1' must be an integer in [%2, %3]").arg(key).arg(lo).arg(hi));
  return static_cast<int>(d);
}

}  // namespace

std::vector<TourStop> readTour(const QString& path, const QStringList& viewIds) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) fail(path, QString(), QStringLiteral("cannot be read (%1)").arg(f.errorString()));
  if (f.size() > kMaxFileBytes)
    fail(path, QString(), QStringLiteral("is %1 bytes; a tour file may have at most %2").arg(f.size()).arg(kMaxFileBytes));
  QJsonParseError err;
  const QJsonDocument doc = QJsonDocument::fromJson(f.read(kMaxFileBytes + 1), &err);
  if (err.error != QJsonParseError::NoError)
    fail(path, QString(), QStringLiteral("not JSON at byte %1 (%2)").arg(err.offset).arg(err.errorString()));
  if (!doc.isObject()) fail(path, QString(), QStringLiteral("must be a JSON object with a 'stops' array"));
  const QJsonObject root = doc.object();
  if (root.value("format").toString() != QLatin1String("hybridlens-tour") || root.value("version").toInt(-1) != 1)
    fail(path, QString(), QStringLiteral("'format' must be \"hybridlens-tour\" and 'version' 1"));
  const QJsonValue stopsValue = root.value("stops");
  if (!stopsValue.isArray()) fail(path, QString(), QStringLiteral("'stops' must be an array"));
  const QJsonArray stops = stopsValue.toArray();
  if (stops.size() > kMaxStops)
    fail(path, QString(), QStringLiteral("has %1 stops; at most %2 are allowed").arg(stops.size()).arg(kMaxStops));
  static const QRegularExpression idPattern(QStringLiteral("^[a-z0-9][a-z0-9-]{0,47}$"));
  static const QRegularExpression modelPattern(QStringLiteral("^[A-Za-z0-9_.-]{1,64}(/[A-Za-z0-9_.-]{1,64})?$"));
  std::vector<TourStop> out;
  QSet<QString> ids;
  for (int i = 0; i < stops.size(); ++i) {
    const QString where = QStringLiteral("stop %1").arg(i);
    if (!stops[i].isObject()) fail(path, where, QStringLiteral("must be an object"));
    const QJsonObject o = stops[i].toObject();
    TourStop s;
    s.id = text(o, "id", 48, true, path, where);
    if (!idPattern.match(s.id).hasMatch()) fail(path, where, QStringLiteral("'id' must be lower-case letters, digits and '-'"));
    if (ids.contains(s.id)) fail(path, where, QStringLiteral("'id' %1 is used twice").arg(s.id));
    ids.insert(s.id);
    const QString at = QStringLiteral("stop '%1'").arg(s.id);
    s.model = text(o, "model", 129, true, path, at);
    if (!modelPattern.match(s.model).hasMatch() || s.model.contains(QLatin1String("..")))
      fail(path, at, QStringLiteral("'model' must name a bundled model (\"baseline\", \"dora/step-60\")"));
    s.title = text(o, "title", 120, true, path, at);
    s.prompt = text(o, "prompt", 4000, true, path, at);
    s.view = text(o, "view", 32, true, path, at);
    if (!viewIds.contains(s.view))
      fail(path, at, QStringLiteral("'view' %1 is not one of %2").arg(s.view, viewIds.join(", ")));
    s.lookFor = text(o, "look_for", 600, true, path, at);
    s.generate = integer(o, "generate", 0, 256, 0, path, at);
    s.layer = integer(o, "layer", 0, 1023, -1, path, at);
    s.head = integer(o, "head", 0, 1023, -1, path, at);
    s.token = integer(o, "token", 0, 1 << 20, -1, path, at);
    const QJsonValue cmp = o.value("compare");
    if (!cmp.isUndefined()) {
      if (!cmp.isObject()) fail(path, at, QStringLiteral("'compare' must be an object"));
      const QJsonObject c = cmp.toObject();
      const QString norm = text(c, "normalizer", 16, false, path, at + ": compare");
      if (!norm.isEmpty()) {
        hl::Normalizer n;
        if (!hl::parse_normalizer(norm.toStdString(), &n))
          fail(path, at, QStringLiteral("compare 'normalizer' must be softmax, softmax1 or sink"));
        s.compareNormalizer = n;
      }
      s.compareRegisters = integer(c, "registers", 0, 64, -1, path, at + ": compare");
      if (!s.compareNormalizer && s.compareRegisters < 0)
        fail(path, at, QStringLiteral("'compare' must give 'normalizer' or 'registers'"));
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace hl::app
