// The backends of this build as a table (issue 14 item 5): one entry per backend, {name, available,
// make, describe}; make_backend, available_backends, the CLI's --backend and the app's backend menu
// all read it. Not the backends themselves: each lives in its own folder, whose entry file adds its
// line to the table (BackendTable), and whose build rule, when its toolchain is optional, is that
// folder's backend.cmake (engine/CMakeLists.txt includes every one it finds).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/core/registry.h"

namespace hl {

class StageLink;    // engine/backend/pipeline.h
struct LayerRange;  // engine/model/stage_load.h

struct BackendEntry {
  const char* name = "";   // what --backend, sessions and traces say: "cpu", "vulkan", "cuda"
  const char* label = "";  // in messages: "using the Vulkan backend"
  int menu_order = 0;      // where menus and lists put it (lowest first: the CPU is 0)
  int auto_rank = 0;       // the order `auto` tries the backends in (lowest first)
  // Whether make() can run here; native: on a device that is not an emulation of another (a Vulkan
  // GPU, not lavapipe on the CPU), which is what `auto` asks for. Cheap after the first call; never throws.
  bool (*available)(bool native) = nullptr;
  // Builds one; for_auto: as `auto` does (native devices only, the same settings otherwise).
  // Throws BackendFailure when the device cannot run the model (no device, not enough memory).
  std::unique_ptr<Backend> (*make)(std::shared_ptr<const Model> model, bool for_auto) = nullptr;
  // Builds one stage of a pipeline over `link` (pipeline.h make_stage_backend): `model` loaded with
  // the layers ranges[link->rank()]. nullptr: the backend cannot run a stage yet.
  std::unique_ptr<Backend> (*make_stage)(std::shared_ptr<const Model> model, StageLink* link,
                                         const std::vector<LayerRange>& ranges) = nullptr;
  // One line saying what the device is ("NVIDIA H200", "llvmpipe (CPU emulation of a Vulkan
  // device)"), or why there is none. Never throws.
  std::string (*describe)() = nullptr;
};

// Where each backend's entry file adds its line: `static const BackendTable::Add reg{entry};`.
using BackendTable = Registry<BackendEntry, struct BackendTag>;
// Every backend built here, in menu order (the CPU first).
const std::vector<BackendEntry>& backend_registry();
// The entry named `name`, or nullptr.
const BackendEntry* find_backend(const std::string& name);
// Whether `name` is usable only as an emulation (available, but not natively: lavapipe).
bool backend_is_emulated(const std::string& name);
// "auto, cpu, vulkan, cuda": what --backend accepts in this build.
std::string backend_choices();

}  // namespace hl
