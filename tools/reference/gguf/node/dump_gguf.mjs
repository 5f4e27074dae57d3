// Independent cross-check for tools/reference/gguf: parse GGUF files with @huggingface/gguf (not our
// code) and print, per file, {version, metadata: {key: {type, subType?, value}}, tensors: [...]} as one
// JSON line; 64-bit integers become decimal strings, as gguf_io.to_json writes them.
// usage: node dump_gguf.mjs FILE...   (a file the parser refuses prints {"file", "error"})
import { gguf, GGUFValueType } from "@huggingface/gguf";

const typeName = (t) => GGUFValueType[t];
const plain = (v) => (typeof v === "bigint" ? v.toString() : Array.isArray(v) ? v.map(plain) : v);

for (const file of process.argv.slice(2)) {
  try {
    const out = await gguf(file, { allowLocalFile: true, typedMetadata: true });
    const metadata = {};
    for (const [k, e] of Object.entries(out.typedMetadata)) {
      if (k === "version" || k === "tensor_count" || k === "kv_count") continue;
      const o = { type: typeName(e.type), value: plain(e.value) };
      if (e.subType !== undefined) o.subType = typeName(e.subType);
      metadata[k] = o;
    }
    const tensors = out.tensorInfos.map((t) => ({
      name: t.name, dims: t.shape.map((d) => d.toString()), type: Number(t.dtype), offset: t.offset.toString(),
    }));
    console.log(JSON.stringify({ file, version: out.typedMetadata.version.value, metadata, tensors,
      tensorDataOffset: out.tensorDataOffset.toString() }));
  } catch (e) {
    console.log(JSON.stringify({ file, error: String(e && e.message ? e.message : e) }));
  }
}
