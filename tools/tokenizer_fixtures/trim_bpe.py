# Trims a byte-level BPE tokenizer.json to its first N vocabulary ids and the merges whose parts and
# result stay inside them (ranks kept), so a smaller copy of a real tokenizer can be vendored as a
# test fixture. Added tokens are kept as they are. Test-fixture tool only.
import json, sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
j = json.load(open(src, encoding="utf-8"))
m = j["model"]
vocab = {t: i for t, i in m["vocab"].items() if i < n}
merges = []
for mg in m["merges"]:
    a, b = mg.split(" ", 1) if isinstance(mg, str) else mg
    if a in vocab and b in vocab and (a + b) in vocab:
        merges.append(mg)
m["vocab"], m["merges"] = vocab, merges
json.dump(j, open(dst, "w", encoding="utf-8"), ensure_ascii=False)
