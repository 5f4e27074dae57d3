// A model pipelined across processes (issue 21 item 3): the layer schedule split into contiguous
// stages balanced by weight bytes, the transport between the stages (StageLink: an interface, so
// the engine names no MPI; app/cli/mpi_comm.cpp implements it), the TokenTrace records' encoding
// for the wire, and the merge of the stages' per-layer slices on stage 0, generic over the trace
// field table. Not the stage's forward pass: the CPU backend (cpu_backend.h) runs one stage.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/model/stage_load.h"
#include "engine/model/token_trace.h"

namespace hl {

// Blocking point-to-point messages between the stages of one pipeline (ranks 0..size-1; stage r
// runs layers ranges[r]). Messages from one rank to another arrive in the order sent. A rank that
// dies must make the others' calls fail or end the job (MPI: its runtime aborts), never hang.
class StageLink {
 public:
  virtual ~StageLink() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // This stage's index among the stages on the same host (0 where that is unknown): which of the
  // host's GPUs a device backend takes (VulkanOptions::device_slot).
  virtual int local_rank() const { return 0; }
  virtual void send(int to, const void* data, size_t bytes) = 0;
  // Exactly `bytes` bytes of the next message from `from` (a message of another size is an Error).
  virtual void recv(int from, void* data, size_t bytes) = 0;
};

// A message of any length: its length first, then the bytes.
void send_bytes(StageLink& link, int to, const std::vector<uint8_t>& bytes);
std::vector<uint8_t> recv_bytes(StageLink& link, int from);

// N contiguous non-empty layer ranges [begin, end) covering [0, L) that minimise the largest
// stage's bytes: the sum of its layers' bytes, plus `first_extra` on stage 0 (the embedding) and
// `last_extra` on stage N-1 (the LM head). Ties go to the split with earlier boundaries. Throws
// Error (one line) when N < 1 or N > L.
std::vector<LayerRange> split_stages(const std::vector<int64_t>& layer_bytes, int n, int64_t first_extra = 0,
                                     int64_t last_extra = 0);
// split_stages over a checkpoint's stored tensor bytes (checkpoint_bytes: headers only).
std::vector<LayerRange> split_checkpoint(const std::string& dir, int n);

// The records' wire form: every field of the trace field table a record holds, plus step_seconds.
std::vector<uint8_t> encode_records(const TokenTrace* const* recs, int64_t S);
// Decodes S records into recs (throws Error when the bytes are not S records).
void decode_records(const std::vector<uint8_t>& bytes, TokenTrace* const* recs, int64_t S);

// Merges the slice of `from` that stage `layers` computed into `into`: the per-layer slots of every
// field whose first axis is a layer axis (A_n, M_n, X_n: the stage's layers of that kind; L+1:
// columns begin+1..end, and 0 for stage 0), and, from the last stage (layers.end == L), every other
// field (logits and what derives from them). nonfinite_layer: the first (smallest) set anywhere.
void merge_stage_record(TokenTrace& into, const TokenTrace& from, const LayerSchedule& s, LayerRange layers);

// One forward's records gathered on stage 0 and merged there, then sent back to every stage, so
// every stage's records (and any decision made from them: the next token) equal the one-process
// run's. `ranges` are every stage's layers. Called by every stage after its part of the forward.
void gather_stage_records(StageLink& link, const std::vector<LayerRange>& ranges, const LayerSchedule& s,
                          TokenTrace* const* recs, int64_t S);
// The end of a stage backend's forward of S records begun at t0: gather_stage_records (nothing
// without a link), then each record's step_seconds the time since t0 shared over the S records —
// stage 0's covers the whole pipeline's step, as it waits for the merge.
void finish_stage_records(StageLink* link, const std::vector<LayerRange>& ranges, const LayerSchedule& s,
                          TokenTrace* const* recs, int64_t S, std::chrono::steady_clock::time_point t0);

// A device stage's host copy of one call's residual rows (registers, or the call's tokens: n rows of
// H floats): sized for them and, on a stage after the first, received from the stage before. Nothing
// without a link; no message for n = 0 (no registers: stage_rows_out then sends none either).
void stage_rows_in(StageLink* link, std::vector<float>& rows, int64_t n, int64_t H);
// The rows to the stage after (nothing on the last stage, without a link, or for no rows).
void stage_rows_out(StageLink* link, const std::vector<float>& rows);
// The end of a device stage's forward (Vulkan, CUDA): its output rows to the stage after, then
// finish_stage_records over out[first, first + S). Nothing without a link.
void finish_device_stage(StageLink* link, const std::vector<float>& rows, const std::vector<LayerRange>& ranges,
                         const LayerSchedule& s, std::vector<TokenTrace>* out, size_t first, int64_t S,
                         std::chrono::steady_clock::time_point t0);

// The layers a stage backend over `link` runs: ranges[link->rank()] (without a link: every layer,
// and *ranges becomes that one range). Throws Error when the ranges are not one per stage or the
// model holds other layers than that range (loaded_layers).
LayerRange stage_layers(const Model& m, const StageLink* link, std::vector<LayerRange>* ranges);

// The backends of this build that run a pipeline stage (BackendEntry::make_stage), in menu order:
// "cpu, vulkan, cuda" where all three are built.
std::string stage_backend_choices();
// "" when backend `which` runs pipeline stages ("auto": the CPU), else the one-line refusal
// "--pipeline: backend NAME is not supported yet (LIST)" with stage_backend_choices() as LIST.
std::string stage_backend_refusal(const std::string& which);
// The backend of one stage of a pipeline over `link`: `model` loaded with load_stage for
// ranges[link.rank()], by the registry's make_stage ("auto" is the CPU: every rank picks the same
// without asking the others); a backend without one throws Error, stage_backend_refusal's line.
// The stages of one pipeline may run on different backends: they exchange the residual rows in
// float32 on the host.
std::unique_ptr<Backend> make_stage_backend(const std::string& which, std::shared_ptr<const Model> model,
                                            StageLink* link, std::vector<LayerRange> ranges);

}  // namespace hl
