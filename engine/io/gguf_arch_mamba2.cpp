// What the Mamba-2 hybrids' GGUF architectures share (granitehybrid, nemotron_h, falcon-h1;
// tools/reference/gguf/GGUF.md §5.2): the SSM keys, the Mamba-2 mixer's tensors and the attention's.
// Each family's own keys and names are in gguf_arch_<family>.cpp.
#include "engine/io/gguf_arch.h"

namespace hl {

std::string gguf_blk(int64_t layer, const char* name) { return "blk." + std::to_string(layer) + "." + name; }

void gguf_read_vocab(GgufTensors& t, JambaConfig& c) {
  const std::vector<int64_t> embd = t.ne_of("token_embd.weight");
  if (embd.size() != 2 || embd[0] != c.hidden_size)
    throw LoadError(t.file() + ": tensor 'token_embd.weight' " +
                    (embd.empty() ? "is missing" : "has " + std::to_string(embd.size()) + " dimensions") + " (expected ne [" +
                    std::to_string(c.hidden_size) + ", vocabulary size])");
  c.vocab_size = embd[1];
  c.tie_word_embeddings = !t.has("output.weight");
}

int64_t gguf_read_mamba2(const GgufMeta& m, const GgufTensors& t, int64_t layer, JambaConfig& c) {
  c.mamba_d_conv = m.integer(m.key("ssm.conv_kernel"), 1, 64);
  c.mamba_d_state = m.integer(m.key("ssm.state_size"), 1, 1024);
  const int64_t Di = m.integer(m.key("ssm.inner_size"), 1, int64_t{1} << 30);
  c.mamba_n_heads = m.integer(m.key("ssm.time_step_rank"), 1, Di);
  if (Di % c.mamba_n_heads != 0)
    throw LoadError(m.where(m.key("ssm.time_step_rank")) + ": " + std::to_string(c.mamba_n_heads) +
                    " (allowed a divisor of ssm.inner_size " + std::to_string(Di) + ": the Mamba-2 heads split it)");
  c.mamba_d_head = Di / c.mamba_n_heads;
  c.mamba_n_groups = m.integer(m.key("ssm.group_count"), 1, c.mamba_n_heads);
  if (c.mamba_n_heads % c.mamba_n_groups != 0)
    throw LoadError(m.where(m.key("ssm.group_count")) + ": " + std::to_string(c.mamba_n_groups) +
                    " (allowed a divisor of ssm.time_step_rank " + std::to_string(c.mamba_n_heads) + ", the heads)");
  c.mamba_conv_bias = layer >= 0 && t.has(gguf_blk(layer, "ssm_conv1d.bias"));
  c.mamba_proj_bias = layer >= 0 && t.has(gguf_blk(layer, "ssm_in.bias"));
  return Di;
}

void gguf_emit_mamba2(GgufTensors& t, const JambaConfig& c, int64_t layer, const std::string& hf) {
  const int64_t H = c.hidden_size, Di = c.mamba_inner(), nh = c.mamba_n_heads, G = c.mamba_n_groups, W = c.mamba_d_conv;
  const int64_t conv = c.mamba2_conv_dim(), proj = Di + conv + nh;  // in_proj rows z | x B C | dt
  auto g = [&](const char* name, std::vector<int64_t> ne) -> const GgufTensor& { return t.take(gguf_blk(layer, name), ne); };
  t.emit(hf + "in_proj.weight", {proj, H}, g("ssm_in.weight", {H, proj}));
  if (c.mamba_proj_bias) t.emit(hf + "in_proj.bias", {proj}, g("ssm_in.bias", {proj}));
  t.emit(hf + "conv1d.weight", {conv, 1, W}, g("ssm_conv1d.weight", {W, conv}));
  if (c.mamba_conv_bias) t.emit(hf + "conv1d.bias", {conv}, g("ssm_conv1d.bias", {conv}));
  t.emit(hf + "dt_bias", {nh}, g("ssm_dt.bias", {nh}));
  t.emit(hf + "A_log", {nh}, g("ssm_a", {1, nh}), 0, -1, GgufImportOp::Kind::LogNeg);
  t.emit(hf + "D", {nh}, g("ssm_d", {1, nh}));
  if (c.mamba_rms_norm) t.emit(hf + "norm.weight", {Di}, g("ssm_norm.weight", {Di / G, G}));
  t.emit(hf + "out_proj.weight", {H, Di}, g("ssm_out.weight", {Di, H}));
  if (c.mamba2_out_bias()) t.emit(hf + "out_proj.bias", {H}, g("ssm_out.bias", {H}));
}

void gguf_emit_attention(GgufTensors& t, const JambaConfig& c, int64_t layer, const std::string& hf, bool permuted) {
  const int64_t H = c.hidden_size, nh = c.num_attention_heads, nkv = c.num_key_value_heads, hd = c.head_dim();
  auto g = [&](const std::string& name, std::vector<int64_t> ne) -> const GgufTensor& {
    return t.take(gguf_blk(layer, name.c_str()), ne);
  };
  struct Proj {
    const char *gguf, *hf;
    int64_t rows, cols, heads;  // heads: those whose rows llama.cpp permuted (0: none)
  };
  const Proj projs[] = {{"attn_q", "q_proj", nh * hd, H, permuted ? nh : 0},
                        {"attn_k", "k_proj", nkv * hd, H, permuted ? nkv : 0},
                        {"attn_v", "v_proj", nkv * hd, H, 0},
                        {"attn_output", "o_proj", H, nh * hd, 0}};
  for (const Proj& p : projs) {
    const std::string w = hf + p.hf + ".weight", b = hf + p.hf + ".bias";
    const GgufTensor& tw = g(std::string(p.gguf) + ".weight", {p.cols, p.rows});
    if (p.heads > 0)
      t.emit_unpermuted(w, {p.rows, p.cols}, tw, p.heads);
    else
      t.emit(w, {p.rows, p.cols}, tw);
    if (!c.attention_bias) continue;
    const GgufTensor& tb = g(std::string(p.gguf) + ".bias", {p.rows});
    if (p.heads > 0)
      t.emit_unpermuted(b, {p.rows}, tb, p.heads);
    else
      t.emit(b, {p.rows}, tb);
  }
}

}  // namespace hl
