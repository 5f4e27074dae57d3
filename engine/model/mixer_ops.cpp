// mixer_ops(): the lookup in the table the kinds' own files fill (mixer_ops.h).
#include "engine/model/mixer_ops.h"

#include "engine/core/error.h"

namespace hl {

const MixerOps& mixer_ops(MixerKind kind) {
  for (const MixerOps& o : MixerOpsTable::entries())
    if (o.kind == kind) return o;
  throw Error(std::string("mixer kind '") + mixer_name(kind) + "': no weights are known for it in this build");
}

}  // namespace hl
