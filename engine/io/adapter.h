// PEFT LoRA / DoRA adapter folders (jamba-spec.md §5): adapter_config.json + adapter_model.safetensors,
// read as untrusted input (reliability-checklist.md, DESIGN.md reliability rules), checked against a
// loaded base model, and merged into it in fp32 (PEFT LoraLayer.get_delta_weight and
// DoraLinearVariant.merge_safe, src/peft/tuners/lora/{layer,variants}.py). Not the ΔM/ΔD
// instrument: probes/dora_probe.h computes that from the same modules.
#pragma once
#include <cstdint>
#include <memory>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "engine/model/weights.h"

namespace hl {

// One rank_pattern / alpha_pattern key or exclude/target regex, compiled once at parse time.
// Keys made only of [A-Za-z0-9_.-] are matched without std::regex ('.' still matches any character,
// as in Python's re), everything else with std::regex (ECMAScript; the breadth-first, polynomial-time executor on
// libstdc++).
class ModulePattern {
 public:
  static constexpr size_t kMaxChars = 256;    // longest pattern accepted
  static constexpr int64_t kMaxRepeat = 100;  // product of all {n,m} repetition counts
  // Throws LoadError "source: what 'text': ..." for an over-long or invalid pattern.
  static ModulePattern compile(const std::string& text, const std::string& source, const std::string& what);
  const std::string& text() const { return text_; }
  bool is_regex() const { return !literal_; }
  // PEFT get_pattern_key: re.match(rf"(.*\.)?({key})$", name).
  bool matches_suffix(const std::string& name) const;
  // PEFT target_modules as a string: re.fullmatch(key, name).
  bool matches_full(const std::string& name) const;

 private:
  std::string text_;
  bool literal_ = false;
  std::shared_ptr<const std::regex> suffix_re_, full_re_;
};

// A module selector of adapter_config.json (target_modules / exclude_modules).
struct ModuleSelector {
  enum class Kind : uint8_t { None, List, Regex, AllLinear };
  Kind kind = Kind::None;
  std::vector<std::string> names;                      // List: a name matches if equal or ending with "." + entry
  std::vector<ModulePattern> regex;                    // Regex: one full-match pattern
  bool matches(const std::string& module_path) const;  // false for None
};

// The keys of adapter_config.json that matter for applying a trained adapter (jamba-spec.md §5.2).
struct AdapterConfig {
  static constexpr uint64_t kMaxBytes = 4u << 20;  // adapter_config.json larger than this is refused
  static constexpr int kMaxDepth = 8;              // JSON nesting depth
  static constexpr size_t kMaxPatternKeys = 4096;  // rank_pattern / alpha_pattern entries
  static constexpr size_t kMaxRegexKeys = 64;      // patterns that need std::regex, all keys together
  static constexpr double kMaxMatchSeconds = 5;    // matching every module against the patterns
  static constexpr int64_t kMaxRank = 65536;
  static constexpr double kMaxAlpha = 1e6;  // |lora_alpha| bound

  int64_t r = 8;
  double lora_alpha = 8;
  bool use_rslora = false;
  bool use_dora = false;
  bool lora_bias = false;
  std::vector<std::pair<ModulePattern, int64_t>> rank_pattern;  // file order: first match wins
  std::vector<std::pair<ModulePattern, double>> alpha_pattern;  // file order: first match wins
  ModuleSelector target_modules, exclude_modules;
  std::vector<int64_t> layers_to_transform;  // empty: every layer
  std::string base_model_name_or_path;
  std::vector<std::string> ignored_fields;  // keys present but not used (informational)

  // Rank and alpha of a module (after rank_pattern / alpha_pattern) and its scaling s:
  // alpha / r, or alpha / sqrt(r) with use_rslora (PEFT LoraLayer.update_layer).
  int64_t rank_for(const std::string& module_path) const;
  double alpha_for(const std::string& module_path) const;
  double scaling_for(const std::string& module_path) const;
  // What the config's target_modules / exclude_modules / layers_to_transform say of a module.
  // Unspecified target_modules accept every module.
  bool targets(const std::string& module_path) const;
};

// Parses adapter_config.json text; `source` names the file in messages. Throws LoadError.
AdapterConfig parse_adapter_config(const std::string& json_text, const std::string& source);

// The low-rank factors of one adapted nn.Linear, widened to float.
struct AdapterModule {
  std::string path;            // PEFT module path without "base_model.model.": "model.layers.3.self_attn.q_proj"
  int64_t rank = 0;            // r of this module (rank_pattern or r)
  int64_t rows = 0, cols = 0;  // (out, in) of the adapted weight
  double alpha = 0, scaling = 0;
  std::vector<float> A;          // (r, in)   lora_A.weight
  std::vector<float> B;          // (out, r)  lora_B.weight
  std::vector<float> B_bias;     // (out,)    lora_B.bias, or empty
  std::vector<float> magnitude;  // (out,)    DoRA lora_magnitude_vector m, or empty (plain LoRA)
  bool is_dora() const { return !magnitude.empty(); }
};

struct Adapter {
  static constexpr const char* kConfigName = "adapter_config.json";
  static constexpr const char* kWeightsName = "adapter_model.safetensors";
  std::string dir;
  AdapterConfig config;
  std::vector<AdapterModule> modules;  // sorted by path
  const AdapterModule* find(const std::string& path) const;
};

// A linear (nn.Linear) module of a loaded model, by its PEFT module path. The pointers point into
// the model; `bias` is the module's bias when the model has one (Mamba projections), else null.
struct LinearModule {
  int layer = -1;            // decoder layer index; -1 for lm_head
  std::string module;        // path without "model.layers.{i}.": "self_attn.q_proj", "feed_forward.experts.3.up_proj"
  std::string path;          // "model.layers.1.self_attn.q_proj", "lm_head"
  const Mat* mat = nullptr;  // (out, in)
  const std::vector<float>* bias = nullptr;  // (out,) or null
};
// Every linear module, in layer order (mixer, then feed-forward: router, experts in index order);
// lm_head last when include_lm_head. Fused experts appear per expert (their Mats are views).
std::vector<LinearModule> linear_modules(const Model& m, bool include_lm_head = true);

// Reads and validates the folder on its own: config keys, tensor names, ranks, A/B pairing, DoRA
// magnitude presence, finite values. Throws LoadError naming the file and the tensor.
Adapter read_adapter(const std::string& dir);
// The same checks on in-memory contents (fuzzers, tests): the text of adapter_config.json and the
// bytes of adapter_model.safetensors; `dir` names the adapter in messages and in Adapter::dir.
// Every tensor is copied out, so the bytes need not outlive the call.
Adapter parse_adapter(const std::string& config_text, const uint8_t* weights, uint64_t size, const std::string& dir);
// Checks the adapter against a base model: every module exists as a linear module with the adapter's
// (out, in), a lora_B.bias only where the base has a bias. Throws LoadError naming the tensor.
void check_adapter(const Adapter& a, const Model& base);
// read_adapter + check_adapter.
Adapter load_adapter(const std::string& dir, const Model& base);

// Row j of the adapted weight of one module, in double: V_j = W0_j + s·(B·A)_j, and for DoRA
// W'_j = m_j · V_j / ‖V_j‖ (jamba-spec.md §5.4; the norm runs over the input dimension).
// w0_row and out are (in,). Returns false (out = V_j) when DoRA meets ‖V_j‖ = 0.
bool adapted_row(const AdapterModule& a, const double* w0_row, int64_t j, double* out);

// Row j of a Mat widened to double (out has m.cols entries).
void mat_row_to_double(const Mat& m, int64_t j, double* out);

// Merges every module into the model: W_merged = W' of adapted_row, stored in owned fp32 buffers
// (kept alive by m.keep_alive) with the Mats repointed (dtype F32); b += s·lora_B.bias where given.
// All merged matrices are computed before any Mat changes, so a failure leaves the model as it was.
// Sets m.adapter = a.dir. Throws LoadError (check_adapter, zero DoRA norm, non-finite result, the fp32
// buffers would exceed memory_budget_bytes — 0: the physical RAM) or Error when the model already
// carries a merged adapter.
void merge_adapter(Model& m, const Adapter& a, uint64_t memory_budget_bytes = 0);

}  // namespace hl
