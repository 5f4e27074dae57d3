#!/usr/bin/env python3
# Writes the seed corpora of the libFuzzer targets (tests/fuzz/corpus/<target>/): small valid files
# and near-valid ones (one field or byte wrong), so the fuzzer starts next to every check of
# reliability-checklist.md. Not the session seeds (tools/bench_session.cpp writes corpus/session).
# Deterministic: run from the repository root, `python3 tests/fuzz/make_seeds.py`; no third-party modules.
import json
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")


def safetensors(tensors, metadata=None, pad_to=8):
    """tensors: list of (name, dtype, shape, raw bytes), laid out in order. Returns the file bytes."""
    header, offset, data = {}, 0, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((-(8 + len(text))) % pad_to)
    return struct.pack("<Q", len(text)) + text + data


def raw_with_header(header_obj_or_text, data=b""):
    text = header_obj_or_text if isinstance(header_obj_or_text, bytes) else json.dumps(header_obj_or_text).encode()
    return struct.pack("<Q", len(text)) + text + data


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


def bf16(*v):
    return b"".join(struct.pack("<f", x)[2:] for x in v)


def f16(*v):
    return struct.pack("<%de" % len(v), *v)


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def safetensors_seeds():
    w = lambda n, b: write("safetensors", n, b)
    w("valid_f32.safetensors", safetensors([("w", "F32", [2, 3], f32(*range(6)))]))
    w("valid_mixed.safetensors", safetensors([
        ("a.weight", "F32", [2, 2], f32(1, 2, 3, 4)),
        ("b.weight", "BF16", [3], bf16(1, -2, 0.5)),
        ("c.bias", "F16", [2], f16(0.25, -1)),
        ("ids", "I64", [2], struct.pack("<2q", 7, -1)),
        ("n", "I32", [1], struct.pack("<i", 3)),
        ("scalar", "F32", [], f32(9)),
        ("empty", "F32", [0, 4], b""),
    ], metadata={"format": "pt", "note": "seed"}))
    w("valid_unpadded_odd.safetensors", safetensors([("h", "BF16", [3], bf16(1, 2, 3)), ("f", "F32", [1], f32(5))], pad_to=1))
    w("valid_rank8.safetensors", safetensors([("r8", "F32", [1] * 8, f32(1))]))
    # Near-valid: each breaks one rule of the checklist.
    good = safetensors([("w", "F32", [2], f32(1, 2))])
    w("bad_truncated.safetensors", good[:-3])
    w("bad_trailing.safetensors", good + b"\0\0\0\0")
    w("bad_header_len_huge.safetensors", struct.pack("<Q", 2**63 + 5) + good[8:])
    w("bad_header_len_past_end.safetensors", struct.pack("<Q", len(good)) + good[8:])
    w("bad_short.safetensors", b"\x05\0\0")
    hdr = lambda h, data=b"": raw_with_header(h, data)
    w("bad_shape_mismatch.safetensors", hdr({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, f32(1, 2)))
    w("bad_dtype.safetensors", hdr({"w": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]}}, b"ab"))
    w("bad_overlap.safetensors", hdr({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                                      "b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, f32(1)))
    w("bad_hole.safetensors", hdr({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, f32(1, 2)))
    w("bad_negative_dim.safetensors", hdr({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, f32(1)))
    w("bad_numel_overflow.safetensors", hdr({"a": {"dtype": "F32", "shape": [2**62, 8], "data_offsets": [0, 4]}}, f32(1)))
    w("bad_rank9.safetensors", hdr({"a": {"dtype": "F32", "shape": [1] * 9, "data_offsets": [0, 4]}}, f32(1)))
    w("bad_extra_field.safetensors", hdr({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "x": 1}}, f32(1)))
    w("bad_metadata_value.safetensors", hdr({"__metadata__": {"k": 1}, "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, f32(1)))
    w("bad_duplicate.safetensors", hdr(b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                                       b'"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', f32(1, 2)))
    w("bad_deep.safetensors", hdr(b'{"__metadata__":{"a":[[[[[[1]]]]]]}}'))
    w("bad_not_utf8.safetensors", hdr(b'{"\xff\xfe":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', f32(1)))
    w("bad_top_array.safetensors", hdr(b'[1,2,3]'))


def config_seeds():
    w = lambda n, b: write("config", n, b)
    for src in ["tests/data/jamba-v0.1-config.json", "tests/golden/gqa_basic/config.json",
                "tests/golden/mqa_tied_bias/config.json", "tests/golden/extensions/config.json",
                "tests/golden/dense_no_moe/config.json"]:
        with open(os.path.join(ROOT, src), "rb") as f:
            w("valid_" + src.split("/")[-2].replace("data", "jamba_v0_1") + ".json", f.read())
    with open(os.path.join(ROOT, "tests/golden/gqa_basic/config.json")) as f:
        base = json.load(f)
    def variant(name, **changes):
        c = dict(base)
        for k, v in changes.items():
            if v is None:
                c.pop(k, None)
            else:
                c[k] = v
        w(name, json.dumps(c, indent=1))
    variant("bad_heads_not_dividing.json", num_attention_heads=5)
    variant("bad_offset_ge_period.json", attn_layer_offset=2)
    variant("bad_topk_gt_experts.json", num_experts_per_tok=8)
    variant("bad_negative_layers.json", num_hidden_layers=-1)
    variant("bad_huge_hidden.json", hidden_size=2**62)
    variant("bad_dt_rank_string.json", mamba_dt_rank="bogus")
    variant("valid_dt_rank_auto.json", mamba_dt_rank="auto")
    variant("bad_missing_vocab.json", vocab_size=None)
    variant("bad_float_layers.json", num_hidden_layers=4.5)
    variant("valid_layers_block_type.json", layers_block_type=["mamba", "attention", "mamba", "attention"])
    variant("bad_layers_block_type_len.json", layers_block_type=["mamba", "attention"])
    variant("valid_auto_map.json", auto_map={"AutoModel": "modeling_jamba.JambaModel"})
    variant("valid_eos_list.json", eos_token_id=[2, 3])
    variant("valid_softmax1.json", attention_normalizer="softmax1", num_register_tokens=2)
    # Python's json.dumps writes float("inf") and float("nan") as bare Infinity / NaN (allow_nan).
    variant("python_inf_time_step_limit.json", time_step_limit=[0.0, float("inf")])
    variant("python_nan_rms_norm_eps.json", rms_norm_eps=float("nan"))
    variant("python_neg_inf_initializer_range.json", initializer_range=float("-inf"), note="Infinity NaN \\\"")
    # Nemotron-H: its own field names, a pattern or a list of kinds (with HF's legacy aliases), MoE ('E')
    # layers (the golden cases' configs) and expert groups that do not divide the experts (refused).
    nemotron = dict(model_type="nemotron_h", vocab_size=64, hidden_size=40, intermediate_size=96,
                    num_hidden_layers=6, hybrid_override_pattern="M-M*-M", num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16, mlp_hidden_act="relu2", ssm_state_size=8,
                    mamba_num_heads=6, mamba_head_dim=8, n_groups=2, conv_kernel=4, use_conv_bias=True,
                    use_bias=False, time_step_min=0.001, time_step_limit=[0.0, float("inf")],
                    layer_norm_epsilon=1e-05)
    w("valid_nemotron_h_pattern.json", json.dumps(nemotron, indent=1))
    w("valid_nemotron_h_list.json", json.dumps(dict(
        model_type="nemotron_h", vocab_size=32, hidden_size=16, intermediate_size=24,
        layers_block_type=["attention", "linear_attention", "mlp", "full_attention"], num_attention_heads=2,
        num_key_value_heads=1, head_dim=None, ssm_state_size=4, mamba_num_heads=4, mamba_head_dim=4,
        mamba_n_groups=2, mamba_d_conv=3, mamba_dt_limit=[0.01, 1.0], tie_word_embeddings=True), indent=1))
    for case in ["nemotron_moe", "nemotron_moe_latent"]:
        with open(os.path.join(ROOT, "tests/golden", case, "config.json"), "rb") as f:
            w("valid_" + case + ".json", f.read())
    w("bad_nemotron_h_moe_groups.json", json.dumps(dict(nemotron, hybrid_override_pattern="MEM*", n_routed_experts=6,
                                                        n_group=4), indent=1))
    # A default (32 heads) larger than the file's hidden_size: refused as if written (found by fuzz_config).
    w("bad_nemotron_h_default_heads.json", json.dumps(
        {k: v for k, v in dict(nemotron, hidden_size=16).items() if k != "num_attention_heads"}, indent=1))
    # Granite 4.0-H: the golden cases' configs and one expert (refused).
    for case in ["granite_moe", "granite_dense"]:
        with open(os.path.join(ROOT, "tests/golden", case, "config.json"), "rb") as f:
            w("valid_" + case + ".json", f.read())
    with open(os.path.join(ROOT, "tests/golden/granite_moe/config.json")) as f:
        granite = json.load(f)
    w("bad_granite_one_expert.json", json.dumps(dict(granite, num_local_experts=1), indent=1))
    # Falcon-H1: mamba_d_ssm with its heads, the µP multipliers and lists, and a bad head count.
    falcon = dict(model_type="falcon_h1", vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16, rope_theta=1e11, mamba_d_ssm=48,
                  mamba_n_heads=6, mamba_d_head=8, mamba_n_groups=2, mamba_d_state=8, mamba_rms_norm=True,
                  mamba_norm_before_gate=False, time_step_limit=[0.0, float("inf")], key_multiplier=0.39,
                  ssm_multipliers=[0.35, 0.25, 0.35, 0.5, 0.35], mlp_multipliers=[0.88, 0.59],
                  lm_head_multiplier=0.039, embedding_multiplier=5.66)
    w("valid_falcon_h1.json", json.dumps(falcon, indent=1))
    w("valid_falcon_h1_nulls.json", json.dumps(dict(falcon, mamba_d_ssm=None, mamba_n_heads=8, mamba_d_head="auto",
                                                    ssm_multipliers=None, mlp_multipliers=None), indent=1))
    w("bad_falcon_h1_heads.json", json.dumps(dict(falcon, mamba_n_heads=5), indent=1))
    w("bad_truncated.json", json.dumps(base)[:200])
    w("bad_empty.json", "")
    w("bad_array.json", "[1, 2]")


def adapter_seeds():
    # Input of fuzz_adapter: adapter_config.json text, then optionally a NUL byte and the bytes of
    # adapter_model.safetensors.
    w = lambda n, b: write("adapter", n, b)
    cfg = {"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ["q_proj", "in_proj"],
           "use_dora": False, "use_rslora": False, "lora_bias": False}
    def mod(path, r, out, inp, dtype="F32", dora=False, bias=False):
        enc = {"F32": f32, "BF16": bf16, "F16": f16}[dtype]
        t = [("base_model.model.%s.lora_A.weight" % path, dtype, [r, inp], enc(*[0.1 * (i % 7 - 3) for i in range(r * inp)])),
             ("base_model.model.%s.lora_B.weight" % path, dtype, [out, r], enc(*[0.05 * (i % 5 - 2) for i in range(out * r)]))]
        if dora:
            t.append(("base_model.model.%s.lora_magnitude_vector" % path, dtype, [out], enc(*[1.0 + 0.1 * i for i in range(out)])))
        if bias:
            t.append(("base_model.model.%s.lora_B.bias" % path, dtype, [out], enc(*[0.01 * i for i in range(out)])))
        return t
    lora = mod("model.layers.1.self_attn.q_proj", 2, 4, 4) + mod("model.layers.0.mamba.in_proj", 2, 8, 4, "BF16")
    w("valid_lora.bin", json.dumps(cfg).encode() + b"\0" + safetensors(lora))
    dcfg = dict(cfg, use_dora=True, use_rslora=True, rank_pattern={"in_proj": 3}, alpha_pattern={"q_proj": 2},
                exclude_modules=["router"], layers_to_transform=[0, 1])
    dora = mod("model.layers.1.self_attn.q_proj", 2, 4, 4, "F16", dora=True) + \
        mod("model.layers.0.mamba.in_proj", 3, 8, 4, dora=True)
    w("valid_dora.bin", json.dumps(dcfg).encode() + b"\0" + safetensors(dora))
    bcfg = dict(cfg, lora_bias=True, target_modules="model\\.layers\\.\\d+\\.mamba\\.(in|out)_proj")
    w("valid_bias_regex.bin", json.dumps(bcfg).encode() + b"\0" +
      safetensors(mod("model.layers.0.mamba.out_proj", 2, 4, 8, bias=True)))
    w("valid_all_linear.bin", json.dumps(dict(cfg, target_modules="all-linear")).encode() + b"\0" + safetensors(lora, pad_to=1))
    with open(os.path.join(ROOT, "tests/golden/adapters/dora_fused/adapter_config.json"), "rb") as f:
        golden_cfg = f.read()
    with open(os.path.join(ROOT, "tests/golden/adapters/dora_fused/adapter_model.safetensors"), "rb") as f:
        golden_st = f.read()
    w("valid_golden_dora_fused.bin", golden_cfg + b"\0" + golden_st)
    with open(os.path.join(ROOT, "tests/golden/adapters/dora/adapter_config.json"), "rb") as f:
        w("valid_config_only_dora.json", f.read())
    # Near-valid.
    w("bad_rank_mismatch.bin", json.dumps(dict(cfg, r=3)).encode() + b"\0" + safetensors(lora))
    w("bad_dora_missing_mag.bin", json.dumps(dict(cfg, use_dora=True)).encode() + b"\0" + safetensors(lora))
    w("bad_missing_B.bin", json.dumps(cfg).encode() + b"\0" + safetensors(lora[:1]))
    w("bad_nan.bin", json.dumps(cfg).encode() + b"\0" +
      safetensors([(lora[0][0], "F32", [2, 4], f32(*([float("nan")] + [0.0] * 7))), lora[1]]))
    w("bad_prefix.bin", json.dumps(cfg).encode() + b"\0" + safetensors([("model.x.lora_A.weight", "F32", [1, 1], f32(1))]))
    w("bad_regex.json", json.dumps(dict(cfg, target_modules="(a+)+$", rank_pattern={"(x{100}){100}": 2})))
    w("bad_rank_zero.json", json.dumps(dict(cfg, r=0)))
    # PEFT writes with Python's json.dumps: bare NaN / Infinity in an ignored and in a used field.
    w("python_nan_dropout.json", json.dumps(dict(cfg, lora_dropout=float("nan"))))
    w("python_inf_alpha.json", json.dumps(dict(cfg, lora_alpha=float("inf"), alpha_pattern={"q_proj": float("-inf")})))
    w("bad_alpha_huge.json", json.dumps(dict(cfg, lora_alpha=1e300)))
    w("bad_layers_type.json", json.dumps(dict(cfg, layers_to_transform="0")))
    w("bad_truncated.bin", json.dumps(cfg).encode() + b"\0" + safetensors(lora)[:-5])


def tokenizer_seeds():
    # Input of fuzz_tokenizer: a mode byte (0 id list, 1 text to encode, 2 a SentencePiece model
    # file), then the payload.
    w = lambda n, b: write("tokenizer", n, b)
    w("ids_valid.txt", b"\x00" + b"1, 2,3 ,2147483647")
    w("ids_bad.txt", b"\x00" + b"1,,-2,x,99999999999")
    w("ids_empty.txt", b"\x00")
    w("text_ascii.txt", b"\x01" + b"Hello world, the quick brown fox.\n\tTabs and 123 numbers.")
    w("text_utf8.txt", b"\x01" + "Grüße, 世界! ▁ — emoji 🙂 and combining é".encode())
    w("text_invalid_utf8.txt", b"\x01" + b"abc\xff\xfe\xc3(\xe2\x82 \xf0\x9f\x99 end\x00nul")
    with open(os.path.join(ROOT, "tests/data/tiny_spm.model"), "rb") as f:
        model = f.read()
    w("model_valid.bin", b"\x02" + model)
    w("model_truncated.bin", b"\x02" + model[: len(model) // 2])
    flipped = bytearray(model)
    flipped[len(flipped) // 3] ^= 0x40
    w("model_flipped.bin", b"\x02" + bytes(flipped))
    # Crafted models of the two crash classes libsentencepiece had (sp_model_check.h): a garbage
    # normaliser charsmap, and a piece over the length limit (17 KB: the 200 KB one exceeds -max_len);
    # and a well-formed hand-built charsmap (A -> B) for the fuzzer to mutate.
    w("model_charsmap_garbage.bin", b"\x02" + model + pb_len(3, pb_len(2, struct.pack("<I", 1024) +
                                                                   bytes((i * 2654435761 >> 13) & 0xFF for i in range(1088)))))
    w("model_piece_17k.bin", b"\x02" + model + pb_len(1, pb_len(1, b"a" * 17000) + b"\x15\0\0\0\0\x18\x01"))
    units = [0] * 768
    units[0] = 256 << 10
    units[321] = ord("A") | (1 << 8) | ((321 ^ 512) << 10)
    units[512] = 1 << 31
    charsmap = struct.pack("<I", 768 * 4) + struct.pack("<768I", *units) + b"B\0"
    w("model_charsmap_a2b.bin", b"\x02" + model + pb_len(3, pb_len(2, charsmap)))


def pb_varint(v):
    out = b""
    while v >= 0x80:
        out += bytes([(v & 0x7F) | 0x80])
        v >>= 7
    return out + bytes([v])


def pb_len(field, body):
    """A length-delimited protobuf field."""
    return pb_varint(field << 3 | 2) + pb_varint(len(body)) + body


def chat_template_seeds():
    # Input of fuzz_chat_template: a Jinja chat template (rendered with a fixed message list).
    w = lambda n, b: write("chat_template", n, b)
    src = os.path.join(ROOT, "tests/data/chat_templates")
    for name in ["zephyr_7b_beta", "mistral_7b_instruct_v0_1", "llama_2_chat", "qwen2_5_7b_instruct",
                 "firefunction_v1", "jamba_large_1_6", "llama_3_1_8b_instruct", "smollm3_3b"]:
        with open(os.path.join(src, name + ".jinja"), "rb") as f:
            w(name + ".jinja", f.read())
    w("features.jinja", b"{% set ns = namespace(n=0) %}{% macro m(a, b=2) %}{{ a ~ b }}{% endmacro %}"
      b"{% for x in messages if x.role != 'tool' %}{{ loop.index }}{{ m(x.content | trim | upper) }}"
      b"{% set ns.n = ns.n + 1 %}{% else %}none{% endfor %}{{ ns.n }}{{ messages | map(attribute='role') | join(',') }}"
      b"{{ {'a': [1, 2.5, none]} | tojson(indent=2) }}{{ 'a-b'.split('-')[::-1] }}{{ 7 // 2 }}{{ 'x' * 3 }}")
    w("bad_unterminated.jinja", b"{% if messages %}{{ messages[0].content ")
    w("bad_loop.jinja", b"{% for i in range(100000000) %}{{ i }}{% endfor %}")
    w("bad_recursion.jinja", b"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}")


def trace_file(T=3, L=4, An=1, nh=2, Xn=2, E=4, K=2, V=16, Di=8, n_reg=0, full=False, edit=None, meta_edit=None):
    """A trace of trace-format.md §3 as `hybridlens trace` writes it (attention at i % 4 == 2 of
    L = 4, MoE every other layer); `edit(tensors)` changes the list before it is laid out."""
    Mn = L - An
    i32 = lambda *v: struct.pack("<%di" % len(v), *v)
    i64 = lambda *v: struct.pack("<%dq" % len(v), *v)
    seq = lambda n, scale=0.01: f32(*[(k % 97) * scale for k in range(n)])
    H = Di // 2
    kv = [2 * An * (n_reg + t + 1) * nh * (H // nh) * 4 for t in range(T)]
    st = [Mn * (4 + 16) * Di * 4] * T
    ts = [("token_ids", "I32", [T], i32(*[(3 * t + 1) % V for t in range(T)])),
          ("logits", "F32", [T, V], seq(T * V)),
          ("attn_entropy", "F32", [T, An, nh], seq(T * An * nh)),
          ("attn_entropy_norm", "F32", [T, An, nh], seq(T * An * nh)),
          ("attn_mass", "F32", [T, An, nh], seq(T * An * nh)),
          ("attn_max_logit", "F32", [T, An, nh], seq(T * An * nh)),
          ("ssm_delta_mean", "F32", [T, Mn], seq(T * Mn)),
          ("router_probs", "F32", [T, Xn, E], seq(T * Xn * E)),
          ("router_topk", "I32", [T, Xn, K], i32(*[(t + k) % E for t in range(T * Xn) for k in range(K)])),
          ("router_lse", "F32", [T, Xn], seq(T * Xn)),
          ("rank1_distance", "F32", [T, L + 1], seq(T * (L + 1))),
          ("resid_max_abs", "F32", [T, L + 1], seq(T * (L + 1))),
          ("nonfinite_layer", "I32", [T], i32(*([-1] * T))),
          ("kv_cache_bytes", "I64", [T], i64(*kv)),
          ("ssm_state_bytes", "I64", [T], i64(*st))]
    if full:
        cols = n_reg + T + 1
        ts += [("ssm_delta", "F32", [T, Mn, Di], seq(T * Mn * Di)),
               ("ssm_retained", "F32", [T, Mn, Di], seq(T * Mn * Di)),
               ("attn_rows", "F32", [T, An, nh, cols], seq(T * An * nh * cols))]
    if edit:
        ts = edit(ts)
    meta = {"format_version": "1", "checkpoint": "seed", "config_sha256": "", "normalizer": "as-trained",
            "registers": str(n_reg), "adapter": "", "backend": "cpu", "engine_version": "seed"}
    if meta_edit:
        meta_edit(meta)
    return safetensors(ts, meta)


def replace(name, dtype, shape, raw):
    return lambda ts: [(name, dtype, shape, raw) if n == name else (n, d, s, r) for n, d, s, r in ts]


def trace_seeds():
    # Input of fuzz_trace: a trace file. Valid ones, then one defect each (the corruption table of
    # tests/views/test_trace_corrupt.cpp has the same defects with their messages).
    w = lambda n, b: write("trace", n, b)
    w("valid_min.safetensors", trace_file())
    w("valid_full_registers.safetensors", trace_file(full=True, n_reg=2))
    w("valid_no_logits.safetensors", trace_file(edit=lambda ts: [t for t in ts if t[0] != "logits"]))
    w("valid_mamba_only.safetensors", trace_file(edit=lambda ts: [t for t in ts if not t[0].startswith("attn_") and not t[0].startswith("router_")], An=0))
    w("bad_version.safetensors", trace_file(meta_edit=lambda m: m.update({"format_version": "2"})))
    w("bad_registers_huge.safetensors", trace_file(full=True, meta_edit=lambda m: m.update({"registers": "70000"})))
    w("bad_layers_over_limit.safetensors", trace_file(L=1025, An=1))
    w("bad_experts_over_limit.safetensors", trace_file(T=1, E=1025))
    w("bad_topk_expert.safetensors", trace_file(edit=replace("router_topk", "I32", [3, 2, 2], struct.pack("<12i", *([9] * 12)))))
    w("bad_nonfinite_layer.safetensors", trace_file(edit=replace("nonfinite_layer", "I32", [3], struct.pack("<3i", 0, 7, -1))))
    w("bad_negative_kv.safetensors", trace_file(edit=replace("kv_cache_bytes", "I64", [3], struct.pack("<3q", -5, 0, 0))))
    w("bad_token_id.safetensors", trace_file(edit=replace("token_ids", "I32", [3], struct.pack("<3i", 1, 16, 2))))
    w("bad_attn_rows_cols.safetensors", trace_file(full=True, edit=replace("attn_rows", "F32", [3, 1, 2, 3], f32(*([0.5] * 18)))))
    w("bad_layer_sum.safetensors", trace_file(edit=replace("ssm_delta_mean", "F32", [3, 2], f32(*([0.1] * 6)))))


def tokenizer_json_seeds():
    # Input of fuzz_tokenizer_json: a tokenizer.json, optionally NUL + tokenizer_config.json. Small
    # files that use every component kind, and near-valid ones.
    w = lambda n, b: write("tokenizer_json", n, b if isinstance(b, bytes) else json.dumps(b).encode())
    bytes_vocab = {"<0x%02X>" % b: b + 3 for b in range(256)}
    bpe = {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "\u0120": 3, "\u0120ab": 4}, "merges": ["a b", "\u0120 ab"]}
    bytelevel = {
        "added_tokens": [{"id": 5, "content": "<eos>", "special": True, "normalized": False, "lstrip": True}],
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Strip"}]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "(?i:'s|'t)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
             "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]},
        "post_processor": {"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A"}}, {"SpecialToken": {"id": "<eos>"}}],
                           "special_tokens": {"<eos>": {"id": "<eos>", "ids": [5], "tokens": ["<eos>"]}}},
        "decoder": {"type": "ByteLevel"}, "model": bpe}
    w("valid_bpe_bytelevel.json", bytelevel)
    sp = {"type": "BPE", "unk_token": "<unk>", "fuse_unk": True, "byte_fallback": True,
          "vocab": dict(bytes_vocab, **{"<unk>": 0, "<s>": 1, "</s>": 2, "\u2581": 259, "h": 260, "i": 261, "hi": 262, "\u2581hi": 263}),
          "merges": ["h i", "\u2581 hi"]}
    w("valid_bpe_byte_fallback.json", {
        "added_tokens": [{"id": 0, "content": "<unk>", "special": True}, {"id": 1, "content": "<s>", "special": True},
                         {"id": 2, "content": "</s>", "special": True}],
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                           {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
        "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
                                                     {"type": "ByteFallback"}, {"type": "Fuse"},
                                                     {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": sp})
    w("valid_unigram_metaspace.json", {
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"},
                                                           {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]},
        "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True},
        "post_processor": {"type": "Sequence", "processors": [{"type": "ByteLevel"}]},
        "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first"},
        "model": {"type": "Unigram", "unk_id": 0, "byte_fallback": True,
                  "vocab": [["<unk>", 0.0], ["\u2581", -2.0], ["\u2581he", -3.0], ["llo", -3.5], ["l", -4.0], ["h", -4.0]]
                           + [["<0x%02X>" % b, -9.0] for b in range(0x20, 0x80)]}})
    w("valid_wordpiece_bert.json", {
        "added_tokens": [{"id": 0, "content": "[UNK]", "special": True}, {"id": 1, "content": "[CLS]", "special": True},
                         {"id": 2, "content": "[SEP]", "special": True}, {"id": 7, "content": "new", "special": False,
                                                                          "single_word": True, "rstrip": True}],
        "normalizer": {"type": "BertNormalizer", "lowercase": True, "strip_accents": None},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "BertPreTokenizer"}, {"type": "Digits", "individual_digits": True},
                                                               {"type": "Punctuation", "behavior": "Contiguous"}]},
        "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 2], "cls": ["[CLS]", 1]},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "hello": 3, "##s": 4, "1": 5, ",": 6, "new": 7}}})
    w("valid_whitespace_split_config.json", json.dumps({
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Whitespace"}, {"type": "WhitespaceSplit"},
            {"type": "Split", "pattern": {"String": "a"}, "behavior": "MergedWithNext", "invert": True}]},
        "post_processor": {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 1]},
        "model": sp}).encode() + b"\0" + json.dumps({"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": True,
                                                      "add_eos_token": True, "bos_token": {"content": "<s>"}, "eos_token": "</s>"}).encode())
    w("bad_precompiled_garbage.json", dict(bytelevel, normalizer={"type": "Precompiled", "precompiled_charsmap": "EAAAAAEAAAACAAAAAwAAAAQAAABhAGIA"}))
    w("bad_merge.json", dict(bytelevel, model=dict(bpe, merges=["a c"])))
    w("bad_regex.json", dict(bytelevel, pre_tokenizer={"type": "Split", "pattern": {"Regex": "(a|aa)+(a|aa)+$"}}))
    w("bad_truncated.json", json.dumps(bytelevel).encode()[:200])


# ---- GGUF (fuzz_gguf: the input is one GGUF file) ------------------------------------------------

GGUF_U8, GGUF_I8, GGUF_U16, GGUF_I16, GGUF_U32, GGUF_I32, GGUF_F32, GGUF_BOOL, GGUF_STRING, GGUF_ARRAY, \
    GGUF_U64, GGUF_I64, GGUF_F64 = range(13)
GGUF_SCALAR = {GGUF_U8: "B", GGUF_I8: "b", GGUF_U16: "H", GGUF_I16: "h", GGUF_U32: "I", GGUF_I32: "i",
               GGUF_F32: "f", GGUF_BOOL: "B", GGUF_U64: "Q", GGUF_I64: "q", GGUF_F64: "d"}
# ggml type ids and (block, bytes per block) of the types the seeds use.
GGML = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q4_1": (3, 32, 20), "Q5_0": (6, 32, 22),
        "Q5_1": (7, 32, 24), "Q8_0": (8, 32, 34), "Q8_1": (9, 32, 36), "BF16": (30, 1, 2)}


def gguf_value(vt, v):
    if vt == GGUF_STRING:
        raw = v.encode() if isinstance(v, str) else v
        return struct.pack("<Q", len(raw)) + raw
    if vt == GGUF_ARRAY:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(gguf_value(et, x) for x in items)
    return struct.pack("<" + GGUF_SCALAR[vt], v)


def gguf(kv, tensors, alignment=32, version=3):
    """kv: list of (key, value type, value); tensors: list of (name, ne (ggml order), type name, raw bytes).
    Tensor data laid out in order, each at a multiple of `alignment` (general.alignment when in kv)."""
    head = [b"GGUF", struct.pack("<IQQ", version, len(tensors), len(kv))]
    for k, vt, v in kv:
        head += [gguf_value(GGUF_STRING, k), struct.pack("<I", vt), gguf_value(vt, v)]
    data, off = b"", 0
    for name, ne, ty, raw in tensors:
        head += [gguf_value(GGUF_STRING, name), struct.pack("<I", len(ne)), struct.pack("<%dQ" % len(ne), *ne),
                 struct.pack("<IQ", GGML[ty][0], off)]
        raw += b"\0" * ((-len(raw)) % alignment)
        data += raw
        off += len(raw)
    h = b"".join(head)
    return h + b"\0" * ((-len(h)) % alignment) + data


def ggml_bytes(ty, ne, seed, negative=False):
    """Deterministic data for a tensor: small finite values (negative ones for ssm_a), quantized blocks
    with a finite f16 scale and pseudo-random codes."""
    n = 1
    for d in ne:
        n *= d
    vals = [((i * 2654435761 + seed * 40503) >> 7 & 1023) / 1024.0 - 0.5 for i in range(n)]
    if negative:
        vals = [-0.05 - abs(v) for v in vals]
    if ty == "F32":
        return f32(*vals)
    if ty == "F16":
        return f16(*vals)
    if ty == "BF16":
        return bf16(*vals)
    _, block, size = GGML[ty]
    out = b""
    for b in range(n // block):
        out += struct.pack("<e", 0.01) + (struct.pack("<e", -0.02) if ty in ("Q4_1", "Q5_1") else b"")
        while len(out) % size:
            out += bytes([(b * 131 + len(out) * 29 + seed) & 0xFF])
    return out


def spm_vocab(pieces):
    """A llama (SentencePiece) vocabulary: <unk> <s> </s>, then `pieces` with falling scores."""
    toks = ["<unk>", "<s>", "</s>"] + pieces
    return [("tokenizer.ggml.model", GGUF_STRING, "llama"),
            ("tokenizer.ggml.tokens", GGUF_ARRAY, (GGUF_STRING, toks)),
            ("tokenizer.ggml.scores", GGUF_ARRAY, (GGUF_F32, [0.0, 0.0, 0.0] + [-1.0 - 0.25 * i for i in range(len(pieces))])),
            ("tokenizer.ggml.token_type", GGUF_ARRAY, (GGUF_I32, [2, 3, 3] + [1] * len(pieces))),
            ("tokenizer.ggml.bos_token_id", GGUF_U32, 1), ("tokenizer.ggml.eos_token_id", GGUF_U32, 2),
            ("tokenizer.ggml.unknown_token_id", GGUF_U32, 0), ("tokenizer.ggml.add_bos_token", GGUF_BOOL, True)]


GPT2_SEED_MERGES = ["\u0120 t", "h e", "\u0120t he", "i n", "a n", "e r", "o n", "\u0120 a", "e n", "r e"]


def gpt2_vocab(pre="default", merges=GPT2_SEED_MERGES):
    """A byte-level BPE vocabulary: two controls, \u0120 (space) \u010a (newline), printable ASCII, the merged pairs."""
    toks = ["<|endoftext|>", "<|pad|>", "\u0120", "\u010a"] + [chr(c) for c in range(33, 127)]
    toks += [m.replace(" ", "") for m in GPT2_SEED_MERGES]
    return [("tokenizer.ggml.model", GGUF_STRING, "gpt2"), ("tokenizer.ggml.pre", GGUF_STRING, pre),
            ("tokenizer.ggml.tokens", GGUF_ARRAY, (GGUF_STRING, toks)),
            ("tokenizer.ggml.token_type", GGUF_ARRAY, (GGUF_I32, [3, 3] + [1] * (len(toks) - 2))),
            ("tokenizer.ggml.merges", GGUF_ARRAY, (GGUF_STRING, merges)),
            ("tokenizer.ggml.eos_token_id", GGUF_U32, 0), ("tokenizer.ggml.padding_token_id", GGUF_U32, 1)]


def jamba_gguf(moe=True, tied=False, vocab=None, edit_kv=None, edit_tensors=None, alignment=32):
    """A tiny Jamba as llama.cpp's converter writes one (GGUF.md section 5.1): hidden 32, 2 layers
    (0: Mamba with 2 experts, 1: attention with a dense MLP; moe=False: dense both), inner 32,
    state 4, conv 4, dt rank 4, 2 heads of 16 with 1 KV head; block types Q8_0 Q4_0 Q5_0 Q5_1,
    F16 and BF16 where llama-quantize would leave them, F32 norms and vectors."""
    H, I, E, Di, N, W, R = 32, 32, 2, 32, 4, 4, 4
    vocab = vocab if vocab is not None else spm_vocab(["\u2581", "a", "e", "h", "l", "o", "r", "\u2581h", "he", "ll", "lo", "\u2581a", "d"])
    V = len(next(v for k, _, v in vocab if k == "tokenizer.ggml.tokens")[1])
    kv = [("general.architecture", GGUF_STRING, "jamba"), ("general.name", GGUF_STRING, "fuzz seed"),
          ("jamba.block_count", GGUF_U32, 2), ("jamba.context_length", GGUF_U32, 64),
          ("jamba.embedding_length", GGUF_U32, H), ("jamba.feed_forward_length", GGUF_U32, I),
          ("jamba.attention.head_count", GGUF_U32, 2),
          ("jamba.attention.head_count_kv", GGUF_ARRAY, (GGUF_I32, [0, 1])),
          ("jamba.ssm.conv_kernel", GGUF_U32, W), ("jamba.ssm.inner_size", GGUF_U32, Di),
          ("jamba.ssm.state_size", GGUF_U32, N), ("jamba.ssm.time_step_rank", GGUF_U32, R),
          ("jamba.attention.layer_norm_rms_epsilon", GGUF_F32, 1e-6),
          ("jamba.expert_count", GGUF_U32, E), ("jamba.expert_used_count", GGUF_U32, 1)] + vocab
    if alignment != 32:
        kv.append(("general.alignment", GGUF_U32, alignment))
    t = [("token_embd.weight", [H, V], "Q8_0"), ("output_norm.weight", [H], "F32")]
    if not tied:
        t.append(("output.weight", [H, V], "Q4_0"))
    t += [("blk.0.attn_norm.weight", [H], "F32"), ("blk.0.ffn_norm.weight", [H], "F32"),
          ("blk.0.ssm_in.weight", [H, 2 * Di], "Q5_0"), ("blk.0.ssm_conv1d.weight", [W, Di], "F32"),
          ("blk.0.ssm_conv1d.bias", [Di], "F32"), ("blk.0.ssm_x.weight", [Di, R + 2 * N], "BF16"),
          ("blk.0.ssm_dt.weight", [R, Di], "F16"), ("blk.0.ssm_dt.bias", [Di], "F32"),
          ("blk.0.ssm_dt_norm.weight", [R], "F32"), ("blk.0.ssm_b_norm.weight", [N], "F32"),
          ("blk.0.ssm_c_norm.weight", [N], "F32"), ("blk.0.ssm_a", [N, Di], "F32"), ("blk.0.ssm_d", [Di], "F32"),
          ("blk.0.ssm_out.weight", [Di, H], "Q5_1")]
    if moe:
        t += [("blk.0.ffn_gate_inp.weight", [H, E], "F32"), ("blk.0.ffn_gate_exps.weight", [H, I, E], "Q4_0"),
              ("blk.0.ffn_up_exps.weight", [H, I, E], "Q4_0"), ("blk.0.ffn_down_exps.weight", [I, H, E], "Q8_0")]
    else:
        t += [("blk.0.ffn_gate.weight", [H, I], "Q4_0"), ("blk.0.ffn_up.weight", [H, I], "Q4_0"),
              ("blk.0.ffn_down.weight", [I, H], "Q8_0")]
    t += [("blk.1.attn_norm.weight", [H], "F32"), ("blk.1.ffn_norm.weight", [H], "F32"),
          ("blk.1.attn_q.weight", [H, 32], "Q8_0"), ("blk.1.attn_k.weight", [H, 16], "Q5_0"),
          ("blk.1.attn_v.weight", [H, 16], "Q8_0"), ("blk.1.attn_output.weight", [32, H], "Q4_0"),
          ("blk.1.ffn_gate.weight", [H, I], "Q4_0"), ("blk.1.ffn_up.weight", [H, I], "Q5_1"),
          ("blk.1.ffn_down.weight", [I, H], "Q8_0")]
    if edit_kv:
        kv = edit_kv(kv)
    if edit_tensors:
        t = edit_tensors(t)
    tensors = [(name, ne, ty, ggml_bytes(ty, ne, k, negative=name.endswith("ssm_a"))) for k, (name, ne, ty) in enumerate(t)]
    return gguf(kv, tensors, alignment=alignment)


def set_kv(key, vt, value):
    return lambda kv: [(k, vt, value) if k == key else (k, t, v) for k, t, v in kv]


def gguf_seeds():
    import tarfile
    w = lambda n, b: write("gguf", n, b)
    # From the fixtures (tests/data/gguf): the K-quant vectors, the SentencePiece vocabulary and every
    # single-file corruption. Not the 85 KB Q4_K_M Jamba (run.sh's -max_len=65536 would cut it; the
    # tiny Jambas below stand for it) nor the split's shards (20 KB each, refused alone).
    with tarfile.open(os.path.join(ROOT, "tests/data/gguf/gguf-fixtures.tar.xz"), "r:xz") as tar:
        for m in sorted(tar.getmembers(), key=lambda m: m.name):
            name = m.name[2:] if m.name.startswith("./") else m.name
            data = tar.extractfile(m).read() if m.isfile() else None
            if name == "quant_vectors.gguf":
                w("quant_vectors_not_a_model.gguf", data)  # its architecture is the fixtures' own
            elif name == "vocab-tiny_spm.gguf":
                w("valid_vocab_tiny_spm.gguf", data)
            elif name.startswith("corrupt/") and name.count("/") == 1 and name.endswith(".gguf"):
                w("corrupt_" + name[len("corrupt/"):], data)
    w("valid_jamba_moe_spm.gguf", jamba_gguf())
    w("valid_jamba_dense_tied_gpt2.gguf", jamba_gguf(moe=False, tied=True, vocab=gpt2_vocab("llama-bpe"), alignment=8))
    w("valid_vocab_gpt2_qwen2.gguf", gguf([("general.architecture", GGUF_STRING, "jamba"), ("general.type", GGUF_STRING, "vocab")]
                                          + gpt2_vocab("qwen2"), []))
    w("valid_vocab_gpt2_gpt2.gguf", gguf(gpt2_vocab("gpt2"), [], version=2))
    # Near-valid: one defect each, past the reader's checks (the dense, tied Jamba: 12 KB smaller).
    small = dict(moe=False, tied=True)
    w("bad_jamba_missing_tensor.gguf", jamba_gguf(**small, edit_tensors=lambda t: [x for x in t if x[0] != "blk.0.ssm_d"]))
    w("bad_jamba_unused_tensor.gguf", jamba_gguf(**small, edit_tensors=lambda t: t + [("blk.7.ssm_d", [32], "F32")]))
    w("bad_jamba_shape.gguf", jamba_gguf(**small, edit_tensors=lambda t: [(n, [64] if n == "blk.0.ssm_d" else ne, ty) for n, ne, ty in t]))
    # Q4_1 is readable now (a dequantize-only type); the file keeps its name. Q8_1 is not.
    w("valid_jamba_type_q4_1.gguf", jamba_gguf(**small, edit_tensors=lambda t: [(n, ne, "Q4_1" if n == "blk.1.ffn_up.weight" else ty)
                                                                       for n, ne, ty in t]))
    w("bad_jamba_type_q8_1.gguf", jamba_gguf(**small, edit_tensors=lambda t: [(n, ne, "Q8_1" if n == "blk.1.ffn_up.weight" else ty)
                                                                       for n, ne, ty in t]))
    w("bad_jamba_inner_size.gguf", jamba_gguf(**small, edit_kv=set_kv("jamba.ssm.inner_size", GGUF_U32, 48)))
    w("bad_jamba_kv_heads.gguf", jamba_gguf(**small, edit_kv=set_kv("jamba.attention.head_count_kv", GGUF_ARRAY, (GGUF_I32, [0, 3]))))
    w("bad_jamba_bos_range.gguf", jamba_gguf(**small, edit_kv=set_kv("tokenizer.ggml.bos_token_id", GGUF_U32, 99)))
    w("bad_jamba_arch.gguf", jamba_gguf(**small, edit_kv=set_kv("general.architecture", GGUF_STRING, "mamba2")))
    w("bad_jamba_experts_used.gguf", jamba_gguf(edit_kv=set_kv("jamba.expert_used_count", GGUF_U32, 3)))
    w("bad_gpt2_merge.gguf", gguf(gpt2_vocab(merges=GPT2_SEED_MERGES + ["q z!"]), []))
    w("bad_gpt2_pre.gguf", gguf(gpt2_vocab("no-such-pre"), []))
    w("bad_spm_scores_count.gguf", gguf(spm_vocab(["a", "b"])[:2] + [("tokenizer.ggml.scores", GGUF_ARRAY, (GGUF_F32, [0.0]))], []))


def main():
    safetensors_seeds()
    config_seeds()
    adapter_seeds()
    tokenizer_seeds()
    chat_template_seeds()
    trace_seeds()
    tokenizer_json_seeds()
    gguf_seeds()
    total = 0
    for t in ["safetensors", "config", "adapter", "tokenizer", "chat_template", "trace", "tokenizer_json", "gguf"]:
        d = os.path.join(CORPUS, t)
        files = sorted(os.listdir(d))
        size = sum(os.path.getsize(os.path.join(d, f)) for f in files)
        total += size
        print("%-12s %3d files, %7d bytes" % (t, len(files), size))
    print("total %d bytes" % total)
    return 0


if __name__ == "__main__":
    sys.exit(main())
