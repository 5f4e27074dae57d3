#!/usr/bin/python3
"""GGUF v2/v3 reader and writer (little-endian), with llama.cpp's multi-file splits.

What it is: the reference for HybridLens' C++ GGUF reader (GGUF.md sections 1-3). The reader treats the
file as untrusted: it checks every count, length, type, dimension, offset and size before it uses it
and stops at the first problem with one line "FILE: OBJECT: PROBLEM (allowed RANGE)" in a GGUFError
whose .code names the check (the codes of GGUF.md section 2). The writer lays files out the way ggml's
gguf.cpp and gguf-py's GGUFWriter do (each tensor at the next multiple of the alignment, zero padding).

Sources (read, not copied): ggml docs/gguf.md (format), ggml src/gguf.cpp (which checks ggml makes),
llama.cpp tools/gguf-split/gguf-split.cpp and gguf-py constants (split keys and file names).

Values: metadata maps key -> (vtype, value); arrays are (ARRAY, (elem_type, [values])). Strings are
str decoded as UTF-8 with surrogateescape, so bytes that are not UTF-8 survive a round trip.
"""
import mmap
import os
import re
import struct

from ggml_quants import GGML_TYPES, TYPE_ID

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
MAX_NAME = 63                       # ggml's GGML_MAX_NAME (64) minus the terminating NUL
MAX_KEY = 65535                     # docs/gguf.md: a key is at most 2^16 - 1 bytes
INT64_MAX = (1 << 63) - 1

(UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64,
 FLOAT64) = range(13)
VTYPE_NAMES = ["UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32", "BOOL", "STRING",
               "ARRAY", "UINT64", "INT64", "FLOAT64"]
_SCALAR = {UINT8: "<B", INT8: "<b", UINT16: "<H", INT16: "<h", UINT32: "<I", INT32: "<i",
           FLOAT32: "<f", BOOL: "<B", UINT64: "<Q", INT64: "<q", FLOAT64: "<d"}
_MIN_SIZE = {t: struct.calcsize(f) for t, f in _SCALAR.items()}
_MIN_SIZE[STRING] = 8
INT_TYPES = (UINT8, INT8, UINT16, INT16, UINT32, INT32, UINT64, INT64)

# smallest encodings, for the count checks: a KV is at least key length (8) + 1 key byte + value type
# (4) + 1 value byte; a tensor info at least name length (8) + 1 name byte + n_dims (4) + 1 dim (8) +
# type (4) + offset (8).
MIN_KV_BYTES = 14
MIN_TENSOR_INFO_BYTES = 33

SPLIT_NO, SPLIT_COUNT, SPLIT_TENSORS = "split.no", "split.count", "split.tensors.count"
SPLIT_RE = re.compile(r"^(.*)-(\d{5})-of-(\d{5})\.gguf$")


class GGUFError(ValueError):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def allowed_types_text():
    ids = sorted(k for k, v in GGML_TYPES.items() if v)
    return f"0..{ids[-1]} except {', '.join(str(k) for k, v in sorted(GGML_TYPES.items()) if not v)}"


class TensorInfo:
    __slots__ = ("name", "dims", "type", "offset", "nbytes", "index", "file")

    def __init__(self, name, dims, ttype, offset, nbytes, index, file=None):
        self.name, self.dims, self.type, self.offset = name, dims, ttype, offset
        self.nbytes, self.index, self.file = nbytes, index, file

    @property
    def type_name(self):
        return GGML_TYPES[self.type][0]

    @property
    def n_elements(self):
        n = 1
        for d in self.dims:
            n *= d
        return n

    @property
    def shape(self):
        """numpy order (slowest first): the reverse of GGUF's ne[] (ne[0] = the contiguous dimension)."""
        return tuple(reversed(self.dims))


class GGUFFile:
    """A parsed file: version, kv (dict key -> (vtype, value), file order), tensors (list), alignment,
    data_start (absolute offset of the data section), size, and the mapped bytes."""

    def __init__(self, path, data):
        self.path, self.data, self.size = path, data, len(data)
        self.version = 0
        self.kv = {}
        self.tensors = []
        self.alignment = DEFAULT_ALIGNMENT
        self.data_start = 0

    def tensor(self, name):
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)

    def tensor_bytes(self, t):
        start = self.data_start + t.offset
        return memoryview(self.data)[start:start + t.nbytes]

    def value(self, key, default=None):
        return self.kv[key][1] if key in self.kv else default


# ---------------------------------------------------------------------------------------------
# reader
# ---------------------------------------------------------------------------------------------

class _Cursor:
    def __init__(self, path, data):
        self.path, self.data, self.size, self.pos = path, data, len(data), 0

    def fail(self, code, obj, problem):
        raise GGUFError(code, f"{self.path}: {obj}: {problem}")

    def left(self):
        return self.size - self.pos

    def take(self, n, obj, what):
        if n > self.left():
            self.fail("eof", obj, f"{what} needs {n} bytes at offset {self.pos}, the file ends after "
                                  f"{self.left()} more (file size {self.size})")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def scalar(self, vtype, obj, what):
        fmt = _SCALAR[vtype]
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), obj, what))[0]

    def string(self, obj, what):
        n = self.scalar(UINT64, obj, f"{what} length")
        if n > self.left():
            self.fail("string_length", obj, f"{what} length {n} runs past the end of the file "
                                            f"(allowed 0..{self.left()} bytes left at offset {self.pos})")
        return bytes(self.take(n, obj, what))


def _decode(raw):
    return raw.decode("utf-8", "surrogateescape")


def _read_value(cur, vtype, obj):
    if vtype == STRING:
        return _decode(cur.string(obj, "string"))
    v = cur.scalar(vtype, obj, VTYPE_NAMES[vtype] + " value")
    if vtype == BOOL:
        if v > 1:
            cur.fail("bool_value", obj, f"bool value {v} (allowed 0 or 1)")
        return bool(v)
    return v


def _read_kv_value(cur, vtype, obj):
    if vtype != ARRAY:
        return _read_value(cur, vtype, obj)
    et = cur.scalar(UINT32, obj, "array element type")
    if et == ARRAY:
        cur.fail("nested_array", obj, "array of arrays is not supported (allowed element types 0..8, 10..12)")
    if et > FLOAT64:
        cur.fail("array_type", obj, f"array element type {et} (allowed 0..8, 10..12)")
    n = cur.scalar(UINT64, obj, "array count")
    if n > cur.left() // _MIN_SIZE[et]:
        cur.fail("array_count", obj, f"array count {n} of {VTYPE_NAMES[et]} needs at least "
                                     f"{n * _MIN_SIZE[et]} bytes (allowed 0..{cur.left() // _MIN_SIZE[et]} "
                                     f"for the {cur.left()} bytes left)")
    if et in _SCALAR and et != BOOL:
        sz = _MIN_SIZE[et]
        raw = cur.take(n * sz, obj, "array data")
        return et, list(struct.unpack(f"<{n}{_SCALAR[et][1]}", raw))
    return et, [_read_value(cur, et, f"{obj}[{i}]") for i in range(n)]


def parse(path, data=None):
    """Parse and check one GGUF file (the bytes `data`, or the file at path mapped read-only)."""
    if data is None:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    g = GGUFFile(path, data)
    cur = _Cursor(path, data)
    magic = cur.take(4, "header", "magic")
    if bytes(magic) != MAGIC:
        cur.fail("magic", "header", f"magic {bytes(magic)!r} is not b'GGUF'")
    v = cur.scalar(UINT32, "header", "version")
    if v not in (2, 3):
        if v & 0xFFFF == 0 and (v >> 24) in (1, 2, 3):
            cur.fail("version", "header", f"version 0x{v:08x} looks big-endian; only little-endian files "
                                          "are supported (allowed 2..3)")
        cur.fail("version", "header", f"version {v}" + (" (GGUF v1 uses 32-bit counts)" if v == 1 else "")
                 + " is not supported (allowed 2..3)")
    g.version = v
    n_tensors = cur.scalar(UINT64, "header", "tensor count")
    n_kv = cur.scalar(UINT64, "header", "metadata count")
    if n_kv > cur.left() // MIN_KV_BYTES:
        cur.fail("kv_count", "header", f"metadata count {n_kv} cannot fit in the {cur.left()} bytes left "
                                       f"(allowed 0..{cur.left() // MIN_KV_BYTES})")
    if n_tensors > cur.left() // MIN_TENSOR_INFO_BYTES:
        cur.fail("tensor_count", "header", f"tensor count {n_tensors} cannot fit in the {cur.left()} bytes "
                                           f"left (allowed 0..{cur.left() // MIN_TENSOR_INFO_BYTES})")
    first_key = {}
    for i in range(n_kv):
        obj = f"key #{i}"
        raw = cur.string(obj, "key")
        if not raw:
            cur.fail("key_empty", obj, "empty key (allowed 1..65535 bytes)")
        if len(raw) > MAX_KEY:
            cur.fail("key_length", obj, f"key is {len(raw)} bytes (allowed 1..{MAX_KEY})")
        try:
            key = raw.decode("utf-8")
        except UnicodeDecodeError:
            cur.fail("key_utf8", obj, "key is not valid UTF-8")
        obj = f"key #{i} '{key}'"
        if key in first_key:
            cur.fail("duplicate_key", obj, f"duplicate of key #{first_key[key]} (keys must be unique)")
        first_key[key] = i
        vt = cur.scalar(UINT32, obj, "value type")
        if vt > FLOAT64:
            cur.fail("value_type", obj, f"value type {vt} (allowed 0..12)")
        g.kv[key] = (vt, _read_kv_value(cur, vt, obj))
    if "general.alignment" in g.kv:
        vt, a = g.kv["general.alignment"]
        if vt != UINT32:
            cur.fail("alignment_type", "general.alignment", f"type {VTYPE_NAMES[vt]} (allowed UINT32)")
        if a == 0 or a & (a - 1):
            cur.fail("alignment", "general.alignment", f"{a} is not a power of two (allowed 1, 2, 4, ..., 2^31)")
        g.alignment = a
    names = {}
    for i in range(n_tensors):
        obj = f"tensor #{i}"
        raw = cur.string(obj, "name")
        if not raw or len(raw) > MAX_NAME:
            cur.fail("tensor_name", obj, f"name is {len(raw)} bytes (allowed 1..{MAX_NAME})")
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            cur.fail("tensor_name", obj, "name is not valid UTF-8")
        obj = f"tensor #{i} '{name}'"
        if name in names:
            cur.fail("duplicate_tensor", obj, f"duplicate of tensor #{names[name]} (names must be unique)")
        names[name] = i
        nd = cur.scalar(UINT32, obj, "n_dims")
        if not 1 <= nd <= 4:
            cur.fail("n_dims", obj, f"n_dims {nd} (allowed 1..4)")
        dims, count = [], 1
        for j in range(nd):
            d = cur.scalar(UINT64, obj, f"dimension {j}")
            if not 1 <= d <= INT64_MAX:
                cur.fail("dim", obj, f"dimension {j} is {d} (allowed 1..{INT64_MAX})")
            if count > INT64_MAX // d:
                cur.fail("element_count", obj, f"dimensions {dims + [d]}... multiply past 2^63-1 "
                                               f"(allowed element count 1..{INT64_MAX})")
            count *= d
            dims.append(d)
        tt = cur.scalar(UINT32, obj, "type")
        if tt not in GGML_TYPES or GGML_TYPES[tt] is None:
            cur.fail("tensor_type", obj, f"type {tt} is unknown (allowed {allowed_types_text()})")
        tname, blk, tsize = GGML_TYPES[tt]
        if dims[0] % blk:
            cur.fail("block_size", obj, f"dimension 0 ({dims[0]}) is not a multiple of the {tname} block "
                                        f"size {blk}")
        if count // blk > INT64_MAX // tsize:
            cur.fail("byte_size", obj, f"{count} {tname} elements need more than 2^63-1 bytes")
        off = cur.scalar(UINT64, obj, "offset")
        g.tensors.append(TensorInfo(name, dims, tt, off, count // blk * tsize, i))
    pad = (-cur.pos) % g.alignment
    g.data_start = cur.pos + pad
    if g.tensors and g.data_start > g.size:
        cur.fail("data_start", "data section", f"would start at {g.data_start} (after {pad} bytes of "
                                               f"padding), past the end of the file (size {g.size})")
    room = g.size - g.data_start
    for t in g.tensors:
        obj = f"tensor #{t.index} '{t.name}'"
        if t.offset % g.alignment:
            cur.fail("offset_alignment", obj, f"offset {t.offset} is not a multiple of the alignment "
                                              f"{g.alignment}")
        if t.offset > room or t.nbytes > room - t.offset:
            cur.fail("offset_range", obj, f"data [{t.offset}, {t.offset + t.nbytes}) runs past the end of "
                                          f"the data section (allowed end <= {room})")
    prev = None
    for t in sorted(g.tensors, key=lambda t: (t.offset, t.index)):
        if prev is not None and t.offset < prev.offset + prev.nbytes:
            cur.fail("overlap", f"tensor #{t.index} '{t.name}'",
                     f"data [{t.offset}, {t.offset + t.nbytes}) overlaps tensor '{prev.name}' "
                     f"[{prev.offset}, {prev.offset + prev.nbytes})")
        prev = t
    return g


# ---------------------------------------------------------------------------------------------
# multi-file splits (llama.cpp gguf-split)
# ---------------------------------------------------------------------------------------------

def split_path(prefix, i, n):
    """llama.cpp's llama_split_path: shard i (0-based) of n."""
    return f"{prefix}-{i + 1:05d}-of-{n:05d}.gguf"


def _int_key(g, key, lo, hi):
    if key not in g.kv:
        raise GGUFError("split_key", f"{g.path}: {key}: missing (every shard of a split carries it)")
    vt, v = g.kv[key]
    if vt not in INT_TYPES or not lo <= v <= hi:
        raise GGUFError("split_key", f"{g.path}: {key}: {VTYPE_NAMES[vt]} {v!r} (allowed an integer in "
                                     f"{lo}..{hi})")
    return v


class Model:
    """A model as one GGUF file or the shards of a split: files, kv (the first file's), tensors
    (all shards, each TensorInfo with .file set)."""

    def __init__(self, files):
        self.files = files
        self.kv = files[0].kv
        self.tensors = [t for f in files for t in f.tensors]
        self.by_name = {t.name: t for t in self.tensors}

    def tensor_bytes(self, name):
        t = self.by_name[name]
        return t.file.tensor_bytes(t)


def open_model(path):
    """One file, or a whole split given the path of any of its shards (names -0000k-of-0000n.gguf)."""
    m = SPLIT_RE.match(os.path.basename(path))
    first = parse(path)
    if SPLIT_COUNT not in first.kv and not m:
        for t in first.tensors:
            t.file = first
        return Model([first])
    if not m:
        raise GGUFError("split_name", f"{path}: split.count is set but the file name does not end in "
                                      "-NNNNN-of-NNNNN.gguf")
    n = int(m.group(3))
    if not 1 <= n <= 65535:
        raise GGUFError("split_name", f"{path}: shard count {n} in the name (allowed 1..65535)")
    prefix = os.path.join(os.path.dirname(path), m.group(1))
    files, total, seen = [], None, {}
    for i in range(n):
        p = split_path(prefix, i, n)
        if not os.path.exists(p):
            raise GGUFError("split_missing", f"{p}: shard {i + 1} of {n} is missing")
        g = first if os.path.abspath(p) == os.path.abspath(path) else parse(p)
        if _int_key(g, SPLIT_NO, 0, 65534) != i:
            raise GGUFError("split_no", f"{p}: split.no is {g.kv[SPLIT_NO][1]} (allowed {i}: the name says "
                                        f"shard {i + 1})")
        if _int_key(g, SPLIT_COUNT, 1, 65535) != n:
            raise GGUFError("split_count", f"{p}: split.count is {g.kv[SPLIT_COUNT][1]} (allowed {n}, "
                                           "the count in the file names)")
        c = _int_key(g, SPLIT_TENSORS, 0, INT64_MAX)
        if total is None:
            total = c
        elif c != total:
            raise GGUFError("split_tensors", f"{p}: split.tensors.count is {c} (allowed {total}, as in "
                                             "shard 1)")
        for t in g.tensors:
            if t.name in seen:
                raise GGUFError("duplicate_tensor", f"{p}: tensor '{t.name}': also in {seen[t.name]}")
            seen[t.name] = p
            t.file = g
        files.append(g)
    if len(seen) != total:
        raise GGUFError("split_tensors", f"{split_path(prefix, 0, n)}: split.tensors.count is {total} but "
                                         f"the {n} shards hold {len(seen)} tensors (allowed equal)")
    return Model(files)


# ---------------------------------------------------------------------------------------------
# writer
# ---------------------------------------------------------------------------------------------

def _pack_value(vtype, value):
    if vtype == STRING:
        raw = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else bytes(value)
        return struct.pack("<Q", len(raw)) + raw
    if vtype == ARRAY:
        et, items = value
        out = [struct.pack("<IQ", et, len(items))]
        out += [_pack_value(et, x) for x in items]
        return b"".join(out)
    if vtype == BOOL:
        return struct.pack("<B", 1 if value else 0)
    return struct.pack(_SCALAR[vtype], value)


class Writer:
    """Collects metadata and tensors, then lays out a GGUF file. kv: list of (key, vtype, value);
    tensors: list of (name, dims (ne order), type id, raw bytes). Alignment comes from a
    general.alignment UINT32 entry when present (else 32)."""

    def __init__(self, version=3):
        self.version = version
        self.kv = []
        self.tensors = []

    def add(self, key, vtype, value):
        self.kv.append((key, vtype, value))
        return self

    def add_array(self, key, elem_type, values):
        return self.add(key, ARRAY, (elem_type, list(values)))

    def add_tensor(self, name, dims, ttype, raw):
        tid = TYPE_ID[ttype] if isinstance(ttype, str) else int(ttype)
        self.tensors.append((name, [int(d) for d in dims], tid, bytes(raw)))
        return self

    def alignment(self):
        for k, vt, v in self.kv:
            if k == "general.alignment" and vt == UINT32:
                return v
        return DEFAULT_ALIGNMENT

    def to_bytes(self):
        a = self.alignment()
        head = [MAGIC, struct.pack("<IQQ", self.version, len(self.tensors), len(self.kv))]
        for k, vt, v in self.kv:
            head += [_pack_value(STRING, k), struct.pack("<I", vt), _pack_value(vt, v)]
        off, data = 0, []
        for name, dims, tid, raw in self.tensors:
            head += [_pack_value(STRING, name), struct.pack("<I", len(dims)),
                     struct.pack(f"<{len(dims)}Q", *dims), struct.pack("<IQ", tid, off)]
            data += [raw, b"\0" * ((-len(raw)) % a)]
            off += len(raw) + (-len(raw)) % a
        h = b"".join(head)
        return h + b"\0" * ((-len(h)) % a) + b"".join(data)

    def write(self, path):
        with open(path, "wb") as f:
            f.write(self.to_bytes())
        return path


def write_split(prefix, kv, tensors, n_split, version=3):
    """Write kv + tensors as n_split shards the way gguf-split --split-max-tensors does: every metadata
    entry in shard 1 followed by split.no (UINT16), split.count (UINT16), split.tensors.count (INT32);
    the other shards carry only the three split keys. Tensors are dealt out in order, as evenly as
    ceil(len/n) per shard allows. Returns the paths."""
    per = -(-len(tensors) // n_split)
    paths = []
    for i in range(n_split):
        w = Writer(version)
        if i == 0:
            for k, vt, v in kv:
                w.add(k, vt, v)
        w.add(SPLIT_NO, UINT16, i).add(SPLIT_COUNT, UINT16, n_split).add(SPLIT_TENSORS, INT32, len(tensors))
        for t in tensors[i * per:(i + 1) * per]:
            w.add_tensor(*t)
        paths.append(w.write(split_path(prefix, i, n_split)))
    return paths


def to_json(g):
    """Metadata and tensor infos as plain JSON values (64-bit integers as decimal strings), the shape
    node/dump_gguf.mjs prints, so check_gguf.py can compare the two parsers."""
    def val(vt, v):
        if vt == ARRAY:
            et, items = v
            return {"type": "ARRAY", "subType": VTYPE_NAMES[et], "value": [val(et, x)["value"] for x in items]}
        if vt in (UINT64, INT64):
            return {"type": VTYPE_NAMES[vt], "value": str(v)}
        return {"type": VTYPE_NAMES[vt], "value": v}
    return {"version": g.version,
            "metadata": {k: val(vt, v) for k, (vt, v) in g.kv.items()},
            "tensors": [{"name": t.name, "dims": [str(d) for d in t.dims], "type": t.type,
                         "offset": str(t.offset)} for t in g.tensors]}
