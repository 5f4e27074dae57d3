#!/usr/bin/python3
"""The GGUF corruption table: small malformed files and the one-line error the reader must give.

Each case is a valid base file (a few metadata entries, two F32 tensors) with one thing broken, built
byte by byte so that any field can hold a value no writer would produce. write_corruptions(dir) writes
<dir>/<name>.gguf (split cases: <dir>/<name>/...) and <dir>/table.json:
  [{"name", "file" (relative path to open), "code" (GGUFError.code, GGUF.md section 2), "message"
    (gguf_io's line with the path replaced by {file}), "what", "npm_rejects" (filled by check_gguf.py)}]
A C++ reader passes when it refuses every file with an error for the same check that names the file,
the object and the allowed range; the exact wording is not part of the contract.
llama.cpp has shipped fixes for most of these (bounds of counts, string lengths, n_dims, element-count
overflow, offsets; see GGUF.md section 2): they are the cases a hostile file will try.
"""
import json
import os
import shutil
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gguf_io as gi  # noqa: E402


def gstr(x):
    raw = x.encode("utf-8") if isinstance(x, str) else x
    return struct.pack("<Q", len(raw)) + raw


def kv(key, vt, payload):
    return gstr(key) + struct.pack("<I", vt) + payload


def tinfo(name, dims, ttype, offset, n_dims=None):
    nd = len(dims) if n_dims is None else n_dims
    return gstr(name) + struct.pack("<I", nd) + b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", ttype, offset)


KV_ARCH = kv("general.architecture", gi.STRING, gstr("jamba"))
KV_U32 = kv("test.u32", gi.UINT32, struct.pack("<I", 7))
KV_ARR = kv("test.arr", gi.ARRAY, struct.pack("<IQ", gi.INT32, 3) + struct.pack("<3i", 1, -2, 3))
KV_STR = kv("test.str", gi.STRING, gstr("hello"))
BASE_KV = [KV_ARCH, KV_U32, KV_ARR, KV_STR]
T_A = tinfo("a", [32], 0, 0)
T_B = tinfo("b", [8, 4], 0, 128)
DATA = struct.pack("<64f", *[float(i) for i in range(64)])


def build(kvs=None, tinfos=None, data=DATA, version=3, magic=b"GGUF", n_kv=None, n_t=None, align=32, cut=None):
    kvs = BASE_KV if kvs is None else kvs
    tinfos = [T_A, T_B] if tinfos is None else tinfos
    head = magic + struct.pack("<IQQ", version, len(tinfos) if n_t is None else n_t, len(kvs) if n_kv is None else n_kv)
    body = head + b"".join(kvs) + b"".join(tinfos)
    body += b"\0" * ((-len(body)) % align) + data
    return body if cut is None else body[:cut]


def cases():
    """(name, what, bytes)"""
    big = (1 << 63) + 5
    yield "magic", "first four bytes are not GGUF", build(magic=b"GGUX")
    yield "version_1", "GGUF v1 (32-bit counts) is not supported", build(version=1)
    yield "version_4", "a version from the future", build(version=4)
    yield "version_big_endian", "a big-endian v3 file read as little-endian", build(version=0x03000000)
    yield "kv_count_huge", "metadata count far beyond the file size", build(n_kv=1 << 40)
    yield "tensor_count_huge", "tensor count far beyond the file size (llama.cpp CVE class)", build(n_t=(1 << 62))
    yield "truncated_header", "file ends inside the header", build()[:20]
    yield "key_length_past_eof", "a key's string length runs past the end", build(
        kvs=[KV_ARCH, struct.pack("<Q", 1 << 40) + b"test.u32"])
    yield "string_value_past_eof", "a string value's length runs past the end", build(
        kvs=[KV_ARCH, kv("test.str", gi.STRING, struct.pack("<Q", 1 << 33) + b"hello")])
    yield "key_empty", "an empty key", build(kvs=[KV_ARCH, kv("", gi.UINT32, struct.pack("<I", 1))])
    yield "duplicate_key", "the same key twice", build(kvs=[KV_ARCH, KV_U32, KV_U32])
    yield "value_type", "metadata value type 13", build(kvs=[KV_ARCH, kv("test.x", 13, struct.pack("<I", 1))])
    yield "array_type", "array element type 99", build(kvs=[KV_ARCH, kv("test.arr", gi.ARRAY, struct.pack("<IQ", 99, 1) + b"\0" * 8)])
    yield "nested_array", "array of arrays (ggml refuses them too)", build(
        kvs=[KV_ARCH, kv("test.arr", gi.ARRAY, struct.pack("<IQ", gi.ARRAY, 1) + struct.pack("<IQ", gi.INT32, 1) + b"\0" * 4)])
    yield "array_count_huge", "array count far beyond the file size", build(
        kvs=[KV_ARCH, kv("test.arr", gi.ARRAY, struct.pack("<IQ", gi.INT32, 1 << 61) + b"\0" * 12)])
    yield "string_array_count_huge", "string array whose count cannot fit", build(
        kvs=[KV_ARCH, kv("test.arr", gi.ARRAY, struct.pack("<IQ", gi.STRING, 1 << 40) + gstr("x"))])
    yield "bool_value", "a bool stored as 2", build(kvs=[KV_ARCH, kv("test.b", gi.BOOL, b"\x02")])
    yield "alignment_type", "general.alignment stored as UINT64", build(
        kvs=[KV_ARCH, kv("general.alignment", gi.UINT64, struct.pack("<Q", 32))])
    yield "alignment_not_pow2", "general.alignment 48", build(kvs=[KV_ARCH, kv("general.alignment", gi.UINT32, struct.pack("<I", 48))])
    yield "alignment_zero", "general.alignment 0", build(kvs=[KV_ARCH, kv("general.alignment", gi.UINT32, struct.pack("<I", 0))])
    yield "tensor_name_empty", "a tensor with an empty name", build(tinfos=[tinfo("", [32], 0, 0)])
    yield "tensor_name_long", "a 64-byte tensor name (ggml allows 63)", build(tinfos=[tinfo("n" * 64, [32], 0, 0)])
    yield "duplicate_tensor", "two tensors named a", build(tinfos=[T_A, tinfo("a", [8, 4], 0, 128)])
    yield "n_dims_5", "n_dims 5", build(tinfos=[tinfo("a", [2, 2, 2, 2, 2], 0, 0)])
    yield "n_dims_0", "n_dims 0", build(tinfos=[tinfo("a", [], 0, 0)])
    yield "n_dims_huge", "n_dims 2^31 with no dimensions after it", build(tinfos=[tinfo("a", [], 0, 0, n_dims=1 << 31)])
    yield "dim_zero", "a dimension of 0", build(tinfos=[tinfo("a", [32, 0], 0, 0)])
    yield "dim_negative", "a dimension >= 2^63 (negative as ggml's int64 ne)", build(tinfos=[tinfo("a", [big], 0, 0)])
    yield "element_count_overflow", "dimensions whose product passes 2^63", build(tinfos=[tinfo("a", [1 << 32, 1 << 31, 4], 0, 0)])
    yield "type_unknown", "tensor type 99", build(tinfos=[tinfo("a", [32], 99, 0)])
    yield "type_removed", "tensor type 4 (Q4_2, removed from ggml)", build(tinfos=[tinfo("a", [32], 4, 0)])
    yield "block_size", "a Q4_K tensor with 32 columns (block 256)", build(tinfos=[tinfo("a", [32], 12, 0)])
    yield "byte_size_overflow", "elements that fit int64 but bytes that do not", build(tinfos=[tinfo("a", [1 << 32, 1 << 29], 0, 0)])
    yield "offset_misaligned", "tensor offset 16 with alignment 32", build(tinfos=[tinfo("a", [4], 0, 16)])
    yield "offset_past_eof", "tensor offset 2^40", build(tinfos=[tinfo("a", [32], 0, 1 << 40)])
    yield "data_past_eof", "data of a valid offset runs past the end", build(tinfos=[T_A, tinfo("b", [8, 8], 0, 128)])
    yield "offset_huge", "offset near 2^64 (offset + size wraps in 64-bit arithmetic)", build(tinfos=[tinfo("a", [32], 0, (1 << 64) - 64)])
    yield "overlap", "two tensors sharing bytes", build(tinfos=[T_A, tinfo("b", [8, 4], 0, 64)])
    yield "truncated_data", "the file ends inside the tensor data", build(cut=-1)
    yield "data_start_past_eof", "the file ends right after the tensor infos", build(data=b"", align=1)


def write_split_case(d, name, broken):
    """Three shards of the base tensors (a, b, c) with one thing broken; returns the path to open."""
    root = os.path.join(d, name)
    os.makedirs(root, exist_ok=True)
    prefix = os.path.join(root, "m")
    ts = [("a", [32], "F32", DATA[:128]), ("b", [8, 4], "F32", DATA[128:]), ("c", [4], "F32", DATA[:16])]
    for i in range(3):
        w = gi.Writer()
        if i == 0:
            w.add("general.architecture", gi.STRING, "jamba")
        no = 5 if (broken == "split_no" and i == 1) else i
        cnt = 2 if (broken == "split_count" and i == 1) else 3
        total = 9 if broken == "split_tensors" else 3
        w.add(gi.SPLIT_NO, gi.UINT16, no).add(gi.SPLIT_COUNT, gi.UINT16, cnt).add(gi.SPLIT_TENSORS, gi.INT32, total)
        t = ts[i] if not (broken == "duplicate_tensor" and i == 2) else ("a",) + ts[2][1:]
        w.add_tensor(*t)
        w.write(gi.split_path(prefix, i, 3))
    if broken == "split_missing":
        os.remove(gi.split_path(prefix, 1, 3))
    return gi.split_path(prefix, 0, 3)


SPLIT_CASES = [("split_missing", "shard 2 of 3 is missing"), ("split_no", "shard 2 says split.no 5"),
               ("split_count", "shard 2 says split.count 2"), ("split_tensors", "split.tensors.count 9, 3 present"),
               ("split_duplicate_tensor", "tensor a in shards 1 and 3")]


def write_corruptions(d):
    table = []
    for name, what, data in cases():
        path = os.path.join(d, name + ".gguf")
        with open(path, "wb") as f:
            f.write(data)
        table.append(_expect(d, name, what, path, lambda p: gi.parse(p)))
    for name, what in SPLIT_CASES:
        if os.path.isdir(os.path.join(d, name)):
            shutil.rmtree(os.path.join(d, name))
        path = write_split_case(d, name, name.replace("split_duplicate_tensor", "duplicate_tensor"))
        table.append(_expect(d, name, what, path, gi.open_model))
    with open(os.path.join(d, "table.json"), "w") as f:
        json.dump(table, f, indent=1, ensure_ascii=False)
        f.write("\n")
    return table


def _expect(d, name, what, path, opener):
    try:
        opener(path)
    except gi.GGUFError as e:
        rel = os.path.relpath(path, d)
        msg = str(e).replace(path, "{file}").replace(os.path.dirname(path) + "/", "{dir}/")
        return {"name": name, "file": rel, "code": e.code, "message": msg, "what": what}
    raise AssertionError(f"corruption case {name} was accepted by gguf_io")


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "corrupt"
    os.makedirs(out, exist_ok=True)
    for row in write_corruptions(out):
        print(f"{row['name']:26s} {row['code']:18s} {row['message']}")
