// One pipeline stage's weights (stage_load.h): the checkpoint mapped and checked whole, the stage's
// matrices copied out of the mapping, the rest never read.
#include "engine/model/stage_load.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "engine/core/error.h"
#include "engine/core/sys_memory.h"
#include "engine/io/adapter.h"
#include "engine/model/quantize.h"
#include "engine/model/weight_binder.h"

namespace hl {

int64_t tensor_layer(const std::string& name) {
  for (size_t at = name.find("layers."); at != std::string::npos; at = name.find("layers.", at + 1)) {
    if (at > 0 && name[at - 1] != '.') continue;
    const size_t i = at + 7;
    size_t j = i;
    while (j < name.size() && name[j] >= '0' && name[j] <= '9') ++j;
    if (j > i && j - i < 10 && j < name.size() && name[j] == '.') return std::stoll(name.substr(i, j - i));
  }
  return -1;
}

namespace {

// The embedding's and the head's tensor names in this checkpoint (the family's spelling).
std::pair<std::string, std::string> end_names(const Checkpoint& ck) {
  Model scratch;
  WeightBinder b(ck, false, scratch);
  return {b.file_name("model.embed_tokens.weight"), b.file_name("lm_head.weight")};
}

}  // namespace

CheckpointBytes checkpoint_bytes(const std::string& dir) {
  const Checkpoint ck = Checkpoint::open(dir, {}, FileAccess::Map);
  if (ck.is_gguf()) throw LoadError(dir + ": a pipeline of a GGUF file is not supported yet (convert it to safetensors)");
  const JambaConfig& c = ck.config();
  const auto [embed, head] = end_names(ck);
  CheckpointBytes out;
  out.layers.assign(static_cast<size_t>(c.num_hidden_layers), 0);
  for (const TensorInfo* t : ck.all_tensors()) {
    const int64_t l = tensor_layer(t->name);
    const auto n = static_cast<int64_t>(t->nbytes());
    if (l >= 0 && l < c.num_hidden_layers)
      out.layers[static_cast<size_t>(l)] += n;
    else if (t->name == embed)
      out.embedding += n;
    else if (t->name == head && !c.tie_word_embeddings)
      out.head += n;
  }
  return out;
}

std::shared_ptr<Model> load_stage(const std::string& dir, const LoadOptions& o, LayerRange range,
                                  const std::string& adapter) {
  auto ck = std::make_shared<Checkpoint>(Checkpoint::open(dir, o.progress, FileAccess::Map));
  if (ck->is_gguf()) throw LoadError(dir + ": a pipeline of a GGUF file is not supported yet (convert it to safetensors)");
  const JambaConfig& c = ck->config();
  const int64_t L = c.num_hidden_layers;
  if (range.begin < 0 || range.end > L || range.begin >= range.end)
    throw LoadError(base_name(dir) + ": pipeline stage layers [" + std::to_string(range.begin) + ", " +
                    std::to_string(range.end) + ") are not a range of the model's " + std::to_string(L) + " layers");
  const bool want_head = range.end == L, want_embed = range.begin == 0 || (want_head && c.tie_word_embeddings);
  const uint64_t budget = o.memory_budget_bytes ? o.memory_budget_bytes : available_memory().bytes;
  auto over_budget = [&](uint64_t bytes, const std::string& what) {
    return LoadError(base_name(dir) + ": pipeline stage layers [" + std::to_string(range.begin) + ", " +
                     std::to_string(range.end) + ") need " + std::to_string(bytes >> 20) + " MiB of " + what +
                     ", more than the memory budget of " + std::to_string(budget >> 20) + " MiB");
  };
  // The budget: this stage's tensors only (quantised on load: their quantised bytes, below).
  const auto [embed_name, head_name] = end_names(*ck);
  uint64_t bytes = 0;
  for (const TensorInfo* t : ck->all_tensors()) {
    const int64_t l = tensor_layer(t->name);
    if (l >= 0 ? l >= range.begin && l < range.end
               : t->name == embed_name ? want_embed
                                       : t->name != head_name || want_head)
      bytes += t->nbytes();
  }
  if (!o.weights && bytes > budget) throw over_budget(bytes, "weights");
  LoadOptions lo = o;
  lo.memory_budget_bytes = ~uint64_t{0};  // checked for the stage
  lo.weights.reset();                     // quantised here, the stage's matrices only
  lo.fp32_activations = false;            // marked after quantising, as load_model does
  const std::shared_ptr<Model> m = bind_model_stage(*ck, lo, range);
  ModelWeights& w = m->w;
  if (!adapter.empty()) {  // checked whole against every layer's shapes, merged into this stage's modules
    Adapter a = load_adapter(adapter, *m);
    std::map<std::string, int> layer_of;
    for (const LinearModule& lm : linear_modules(*m, true)) layer_of[lm.path] = lm.layer;
    std::erase_if(a.modules, [&](const AdapterModule& am) {
      const int l = layer_of.at(am.path);
      return l < 0 ? range.end != L : l < range.begin || l >= range.end;
    });
    merge_adapter(*m, a, o.memory_budget_bytes);
  }
  for (int64_t i = 0; i < L; ++i)
    if (i < range.begin || i >= range.end) w.layers[static_cast<size_t>(i)] = LayerWeights{};
  const bool tied = w.lm_head.data == w.embed.data;
  // A tied head stays the embedding's view while quantising, so the rule for the pair (quantised
  // together with +head) is the whole model's; it goes after, where the stage has no head.
  if (!want_embed) w.embed = Mat{};
  if (!want_head && (!tied || !want_embed)) w.lm_head = Mat{};
  if (o.weights) {
    const WeightQuantization plan = plan_quantization(*m, *o.weights, o.quantize_head);
    if (static_cast<uint64_t>(plan.bytes_after) > budget)
      throw over_budget(static_cast<uint64_t>(plan.bytes_after), std::string("matrices as ") + dtype_name(*o.weights));
    QuantizeHooks hooks;
    hooks.progress = o.progress.callback;
    quantize_model(*m, *o.weights, false, hooks, o.quantize_head);  // the kept ones are copied below
  }
  interleave_rows16(*m);  // a GGUF file's Q4_K and Q8_0 matrices (in the import's own buffer)
  if (!want_head) w.lm_head = Mat{};
  // Copy what the stage keeps out of the mappings a piece at a time, dropping each piece's mapped
  // pages after its copy: the peak stays the stage's bytes plus one piece (not plus the largest matrix).
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  constexpr size_t kPiece = size_t{16} << 20;
  const std::vector<std::shared_ptr<const MappedFile>> maps = ck->mappings();
  auto mapped = [&](const uint8_t* p, size_t n) {
    for (const auto& map : maps)
      if (map && p >= map->data() && p + n <= map->data() + map->size()) return true;
    return false;
  };
  for (Mat* x : m->matrices()) {
    const size_t n = static_cast<size_t>(x->bytes());
    const auto* src = static_cast<const uint8_t*>(x->data);
    const bool drop = mapped(src, n);
    if (!drop) continue;  // owned already: merged, quantised or converted when bound
    std::shared_ptr<uint8_t[]> buf(new uint8_t[n]);
    for (size_t at = 0; at < n; at += kPiece) {
      const size_t len = std::min(kPiece, n - at);
      std::memcpy(buf.get() + at, src + at, len);
      const uintptr_t lo = (reinterpret_cast<uintptr_t>(src + at) + page - 1) / page * page;
      const uintptr_t hi = reinterpret_cast<uintptr_t>(src + at + len) / page * page;
      if (drop && hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
    }
    x->data = buf.get();
    m->keep_alive.push_back(buf);
  }
  if (tied && want_head) w.lm_head = w.embed;
  if (o.fp32_activations) keep_fp32_activations(*m);
  // The mappings go: nothing of the model points into them now.
  std::vector<const void*> gone;
  for (const auto& map : ck->mappings()) gone.push_back(map.get());
  std::erase_if(m->keep_alive, [&](const std::shared_ptr<const void>& p) {
    return std::find(gone.begin(), gone.end(), p.get()) != gone.end();
  });
  return m;
}

LayerRange loaded_layers(const Model& m) {
  LayerRange r{-1, -1};
  for (size_t i = 0; i < m.w.layers.size(); ++i) {
    const LayerWeights& l = m.w.layers[i];
    if (l.input_norm.empty() && l.pre_ff_norm.empty()) continue;
    if (r.begin < 0) r.begin = static_cast<int64_t>(i);
    r.end = static_cast<int64_t>(i) + 1;
  }
  if (r.begin < 0) r = LayerRange{0, 0};
  return r;
}

}  // namespace hl
