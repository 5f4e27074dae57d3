# Writes a Hugging Face tokenizer.json (Unigram model, Precompiled + Metaspace, T5/ALBERT style) from
# a SentencePiece unigram .model, the way such files are converted for T5-like checkpoints. Reads the
# protobuf wire format directly (ModelProto: 1 pieces{1 piece, 2 score, 3 type}, 3 normalizer_spec
# {2 precompiled_charsmap}). Test-fixture tool only; the engine never runs it.
import base64, json, sys

def varint(b, i):
    v = s = 0
    while True:
        c = b[i]; i += 1
        v |= (c & 0x7F) << s; s += 7
        if c < 0x80: return v, i

def fields(b):
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        f, t = key >> 3, key & 7
        if t == 0: v, i = varint(b, i)
        elif t == 1: v = b[i:i+8]; i += 8
        elif t == 5: v = b[i:i+4]; i += 4
        elif t == 2:
            n, i = varint(b, i); v = b[i:i+n]; i += n
        else: raise ValueError("wire type %d" % t)
        yield f, t, v

import struct
data = open(sys.argv[1], "rb").read()
pieces, charsmap = [], b""
for f, t, v in fields(data):
    if f == 1:
        p, score, typ = "", 0.0, 1
        for g, u, w in fields(v):
            if g == 1: p = w.decode("utf-8")
            elif g == 2: score = struct.unpack("<f", w)[0]
            elif g == 3: typ = w
        pieces.append((p, score, typ))
    elif f == 3:
        for g, u, w in fields(v):
            if g == 2: charsmap = w
unk = next(i for i, p in enumerate(pieces) if p[2] == 2)
byte_fallback = any(p[2] == 6 for p in pieces)
added = [{"id": i, "content": p[0], "single_word": False, "lstrip": False, "rstrip": False,
          "normalized": False, "special": True} for i, p in enumerate(pieces) if p[2] in (2, 3)]
eos = next(p[0] for p in pieces if p[0] == "<|endoftext|>")
eos_id = next(i for i, p in enumerate(pieces) if p[0] == eos)
tok = {
    "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
    "normalizer": {"type": "Sequence", "normalizers": [
        {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(charsmap).decode()},
        {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]},
    "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
    "post_processor": {"type": "TemplateProcessing",
        "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": eos, "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": eos, "type_id": 0}},
                 {"Sequence": {"id": "B", "type_id": 1}}, {"SpecialToken": {"id": eos, "type_id": 1}}],
        "special_tokens": {eos: {"id": eos, "ids": [eos_id], "tokens": [eos]}}},
    "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
    "model": {"type": "Unigram", "unk_id": unk, "byte_fallback": byte_fallback,
              "vocab": [[p[0], p[1]] for p in pieces]},
}
json.dump(tok, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)
