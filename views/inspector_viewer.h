// InspectorViewer: what a view implements to follow the app's inspector context (issue 17 item 1,
// after the viewer interface of RenderDoc's capture context): one call per batch of changes, saying
// what changed, so that a view redraws only when something it draws from changed. An interface only;
// the context that owns the recording, the step and the selection lives in the app (app/inspector_context.h).
#pragma once

#include "views/view_state.h"

namespace hl::views {

// What changed since a viewer was last told (bits, or-ed together).
namespace change {
constexpr unsigned Recording = 1u << 0;  // a recording was opened, closed or replaced; the model changed
constexpr unsigned Runs = 1u << 1;       // a run was added, replaced or removed (run B, a compared session)
constexpr unsigned Records = 1u << 2;    // records were appended to the runs from token `appendedFrom`
constexpr unsigned Step = 1u << 3;       // the current token moved (scrubbing, or following the latest)
constexpr unsigned Selection = 1u << 4;  // the selected layer or head
constexpr unsigned Settings = 1u << 5;   // B − A, DoRA rows, hardware numbers, vocabulary
constexpr unsigned Hidden = 1u << 6;    // a hidden-attention result arrived (ViewState::hidden)
constexpr unsigned All = (1u << 7) - 1;
}  // namespace change

class InspectorViewer {
 public:
  virtual ~InspectorViewer() = default;
  // `s` is the state after the changes `what`; with change::Records, tokens [appendedFrom, T) are new.
  virtual void contextChanged(const ViewState& s, unsigned what, int appendedFrom) = 0;
  // The changes this viewer draws from: the others only update its stored state.
  virtual unsigned dependsOn() const { return change::All; }
  // False while hidden: the context keeps its changes and tells it when it is shown again.
  virtual bool viewerVisible() const = 0;
};

}  // namespace hl::views
