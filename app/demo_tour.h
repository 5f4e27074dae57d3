// The guided tour of the bundled demo models (issue 20 item 3): `tour.json` beside the models
// (resources/models/tour.json) lists, per model, one or two prompts that show what the model was
// trained to show, the instrument to look at and one sentence on what to look for. File > Open demo
// model offers them under each model; choosing one opens the model (and its fine-tune) unless it is
// open, feeds the prompt, optionally re-runs it as run B with a toggle, raises the view and says the
// sentence. The format is in resources/docs/demo-tour.md.
#pragma once
#include <QString>
#include <QStringList>
#include <optional>
#include <vector>

#include "engine/io/config.h"

namespace hl::app {

struct TourStop {
  QString id;       // [a-z0-9-], unique in the file
  QString model;    // a bundled model: "baseline", "no-attention", "dora/step-60"
  QString title;    // the menu entry
  QString prompt;   // text for the model's tokenizer (a BOS is added as for any prompt)
  QString view;     // the instrument to raise: a view id ("attention", "dora", ...)
  QString lookFor;  // one sentence: what to look for
  int generate = 0;                           // tokens generated after the prompt (0..256)
  std::optional<hl::Normalizer> compareNormalizer;  // run B: the prompt again with this normalizer
  int compareRegisters = -1;                  // run B: with this many registers (-1: not toggled)
  int layer = -1, head = -1;                  // the layer and head to select (-1: leave as they are)
  int token = -1;                             // the token to scrub to (-1 or beyond the run: the last)
};

// Reads and checks a tour file: at most 1 MiB, at most 64 stops, every field of the allowed type and
// length; `viewIds` are the instrument ids a stop may name. Throws hl::Error, one line naming the
// file, the stop and the field.
std::vector<TourStop> readTour(const QString& path, const QStringList& viewIds);

}  // namespace hl::app
