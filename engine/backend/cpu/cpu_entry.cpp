// The CPU backend's registry entry (backend_registry.h): always available, never an emulation,
// the reference every other backend is checked against. Not the backend: cpu_backend.cpp.
#include <fstream>
#include <string>

#include "engine/backend/backend_registry.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/thread_pool.h"

namespace hl {

namespace {

// "model name" of /proc/cpuinfo (proc(5)), "" when it cannot be read.
std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    const size_t start = line.find_first_not_of(' ', colon + 1);
    return start == std::string::npos ? "" : line.substr(start);
  }
  return "";
}

}  // namespace

BackendEntry cpu_backend_entry() {
  BackendEntry e;
  e.menu_order = 0;
  e.name = "cpu";
  e.label = "CPU";
  e.auto_rank = 100;  // the last resort of `auto`
  e.available = [](bool) { return true; };
  e.make = [](std::shared_ptr<const Model> model, bool) -> std::unique_ptr<Backend> {
    return std::make_unique<cpu::CpuBackend>(std::move(model));
  };
  e.make_stage = [](std::shared_ptr<const Model> model, StageLink* link,
                    const std::vector<LayerRange>& ranges) -> std::unique_ptr<Backend> {
    return std::make_unique<cpu::CpuBackend>(std::move(model), link, ranges);
  };
  e.describe = [] {
    const std::string cpu = cpu_model_name();
    return (cpu.empty() ? std::string("this machine's CPU") : cpu) + ", " +
           std::to_string(ThreadPool::global().size()) + " threads (the reference backend)";
  };
  return e;
}

static const BackendTable::Add kRegistered{cpu_backend_entry()};

}  // namespace hl
