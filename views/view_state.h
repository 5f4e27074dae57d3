// ViewState: everything an instrument view draws from — the recording, run A and the optional
// compare run B, the current step, the selected layer and head, B − A, DoRA rows and the hardware
// numbers of the latency floor. Plain values and non-owning pointers filled by the app (or by
// `hybridlens export`); views never call the engine. Reference: issue 5 items 3–4, DESIGN.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/layer_schedule.h"
#include "engine/probes/dora_probe.h"
#include "sessions/recording.h"

namespace hl::views {

// What the latency and memory views need from the machine and the loaded model (the app fills it
// from hl::Model::weight_bytes_per_token and the bandwidth measured by `hybridlens bench`).
struct HardwareInfo {
  int64_t weightBytesPerToken = 0;  // bytes one decode step reads (0: unknown, no floor drawn)
  double bandwidthGBs = 0;          // memory bandwidth in GB/s (1e9 bytes/s; 0: unknown)
  double deviceMemoryBytes = 0;     // memory of the device that holds the KV cache (0: unknown)
  int64_t cacheBytes = 0;           // last-level cache of the CPU (0: unknown): weights that fit are no DRAM floor
  std::string deviceName;           // "CPU", "NVIDIA H200", ... (legend text)
};

// The hidden attention of one SSM layer at one token of run A (Ali, Zimerman & Wolf 2024; defined in
// trace-format.md §5): M[q, s] over the keys s ≤ q (registers first, then tokens) for the queries
// firstQuery..token, computed on demand by the app's engine thread (engine/probes/hidden_attention.h)
// for the attention pattern view. Plain values.
struct HiddenPattern {
  uint64_t dataVersion = 0;               // ViewState::dataVersion it belongs to
  int layer = -1, token = -1, head = -1;  // head −1: the mean |M| over the heads (Mamba-1: channels)
  bool mamba1 = false;
  int heads = 0, nReg = 0, dState = 0;   // heads (Mamba-1: channels), register rows before token 0, N
  int firstQuery = 0;                    // rows[i] is query firstQuery + i
  std::vector<std::vector<float>> rows;  // query q: M over its nReg + q + 1 keys (a head: signed)
  bool complete = true;                  // false: the current row only; the earlier rows follow
  double rowMs = 0, catchUpMs = 0;       // the current row's time; feeding the tokens the tracker lacked
  // The current row's statistics over its |M| normalised to sum 1 (hidden_row_stats): entropy in nats,
  // that entropy ÷ ln(keys), and the share of the first key.
  double entropy = 0, entropyNorm = 0, firstMass = 0;
  std::string error;                     // why there is none (no live run, not an SSM layer, ...)
};

struct ViewState {
  const hl::Recording* rec = nullptr;  // null: the view shows "no data"
  const hl::Run* a = nullptr;          // run A (usually &rec->runs[0]); null: no data
  const hl::Run* b = nullptr;          // compare run B (same tokens, other toggles) or null
  // Current token index t (0-based, into a->records): the cursor. Curves and heatmaps over tokens
  // are drawn whole with a line at this step; values at one token (depth curves, bars, the current
  // row) and the router's window statistics use tokens up to it. -1 (or past the end) means the
  // last record.
  int step = -1;
  int layer = -1;                                   // selected decoder layer index 0..L-1, or -1 for none
  int head = 0;                                     // selected attention head 0..nh-1
  bool showDiff = false;                            // with B: draw B − A instead of overlaying A and B
  const std::vector<hl::DoraRow>* dora = nullptr;   // rows of `hybridlens dora` (A), or null
  const std::vector<hl::DoraRow>* doraB = nullptr;  // a second set to compare (e.g. LoRA), or null
  std::string doraLabel = "DoRA", doraLabelB = "LoRA";
  HardwareInfo hw;
  // Token text by id for the next-token candidates (the app fills it from the tokenizer); null or
  // short: candidates are labelled "#id".
  const std::vector<std::string>* vocab = nullptr;
  // Bump when a run's records change other than by appending (a run replaced, a recording
  // reloaded): views cache per-run data keyed on it. Appending records needs no bump.
  uint64_t dataVersion = 0;
  // The SSM hidden attention the app computed last (null: none asked for yet); views check that it
  // is for their layer, token, head and dataVersion.
  const HiddenPattern* hidden = nullptr;
  // Someone answers AttentionPatternView::hiddenAttentionWanted (the app); false (an export without
  // the app): SSM layers are not offered and the attention view shows attention layers only.
  bool hiddenOnDemand = false;
};

// The dimensions of the recorded model (trace-format.md §2 notation) in the views' ints: a read-out
// of its layer schedule (engine/model/layer_schedule.h, which holds the layer kinds, the per-kind
// indices and the layer sizes) plus the vocabulary size of its config. No schedule logic here.
struct ModelShape {
  hl::LayerSchedule schedule;
  int L = 0;  // decoder layers
  int An = 0, Mn = 0, Xn = 0;
  int nh = 0, nkv = 0, headDim = 0;
  int E = 0, k = 0;  // experts, experts per token
  int Di = 0, dState = 0, dConv = 0;
  int V = 0;
  std::vector<int> attnLayers, mambaLayers, moeLayers;  // the schedule's layers of each kind, increasing
  // Index of layer `layer` among its kind (into a record's (A_n, ...) axis), or -1: the schedule's.
  int attnOrdinal(int layer) const;
  int mambaOrdinal(int layer) const;
  int moeOrdinal(int layer) const;
};

ModelShape modelShape(const hl::JambaConfig& c);
// The layer a view of one kind shows: `layer` when it is one of `layers` (increasing), else the
// first of them; -1 when there are none.
int layerOrFirst(const std::vector<int>& layers, int layer);

// Registers of a run: the resolved count, checked against the record's attn_rows length.
int runRegisters(const hl::Run& run, const ModelShape& s);
// The step a view shows for `run`: clamp(state.step, 0, records − 1), or -1 when there are none.
int effectiveStep(const ViewState& st, const hl::Run* run);
// True when the state carries a recording and a run A with at least one record.
bool hasRecords(const ViewState& st);

}  // namespace hl::views
