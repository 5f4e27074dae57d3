// App-wide settings and places: recent-file lists in QSettings, the light and dark palettes, where
// the bundled demo models are (source tree, build tree or installed share/hybridlens/models) and
// what they hold, and the autosave file. No windows here.
#pragma once
#include <QString>
#include <QStringList>
#include <vector>

namespace hl::app {

constexpr int kMaxRecent = 10;
// Keys of the recent lists in QSettings.
inline const char* kRecentCheckpoints = "recent/checkpoints";
inline const char* kRecentSessions = "recent/sessions";

QStringList recentList(const char* key);  // existing entries, newest first
void addRecent(const char* key, const QString& path);
void removeRecent(const char* key, const QString& path);

// Natural order of names: digit runs compare as numbers ("step-7" before "step-60").
bool naturalLess(const QString& a, const QString& b);

// True when the backend `name` runs on a CPU emulation of a GPU (Vulkan on lavapipe): decoding is
// about 100 times slower than the cpu backend; such a choice is not remembered across starts.
bool backendIsEmulated(const QString& name);
// The backend menu's text for `name`: with the registry's description of the device when it is an
// emulation ("vulkan (llvmpipe …: CPU emulation of a Vulkan device, …)"), else the name.
QString backendMenuLabel(const QString& name);

// The application palette and style for the light or dark theme (Fusion with a dark palette).
void applyAppTheme(bool dark);

// A bundled demo model: a checkpoint variant, or a fine-tune of `base` (a PEFT adapter folder or a
// fully fine-tuned checkpoint, both shown in the DoRA view against the base).
struct DemoModel {
  enum class Kind { Checkpoint, Adapter, Tuned };
  Kind kind = Kind::Checkpoint;
  QString name;  // "baseline", "dora/step-60"
  QString dir;   // absolute folder
  QString base;  // for fine-tunes: the base checkpoint folder
};
// The first folder holding the bundled models, or empty: $HYBRIDLENS_MODELS, then
// <binary>/../share/hybridlens/models, then resources/models of the source tree.
QString bundledModelsDir();
// The randomly initialised demo checkpoint (resources/demo-random), or empty.
QString randomDemoDir();
std::vector<DemoModel> bundledModels(const QString& root);
// The model `tools/setup.sh --run` opens: the baseline if bundled, else the random demo.
QString defaultDemoDir();

// The folder of the autosaves (per user, in the app's data folder; one file per running instance,
// see autosave_store.h).
QString autosaveDir();

}  // namespace hl::app
