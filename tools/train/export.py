"""Writers for the shipped files: Hugging Face Jamba folders (config.json, BF16 model.safetensors,
tokenizer.model) and PEFT LoRA/DoRA adapter folders (adapter_config.json, adapter_model.safetensors,
jamba-spec.md §5). The safetensors writer is written here (8-byte little-endian header length,
JSON header, raw little-endian row-major data)."""
import json
import os
import shutil
import struct

import numpy as np
import torch

DTYPE_NAME = {torch.bfloat16: "BF16", torch.float32: "F32", torch.float16: "F16", torch.int32: "I32",
              torch.int64: "I64"}


def tensor_bytes(t):
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().astype("<i2").tobytes()
    return t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()


def write_safetensors(path, tensors, metadata=None):
    """tensors: dict name -> torch tensor (written in its own dtype), in sorted name order."""
    header = {}
    blobs = []
    off = 0
    for name in sorted(tensors):
        t = tensors[name]
        b = tensor_bytes(t)
        header[name] = {"dtype": DTYPE_NAME[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)  # align the data section to 8 bytes
    tmp = path + ".tmp"
    with open(tmp, "wb") as fh:
        fh.write(struct.pack("<Q", len(h)))
        fh.write(h)
        for b in blobs:
            fh.write(b)
    os.replace(tmp, path)


def bf16_round(t):
    """The value a tensor has after a BF16 round trip (round to nearest even), as fp32."""
    return t.detach().to(torch.bfloat16).to(torch.float32)


def export_checkpoint(model, out_dir, tokenizer_model, extra_meta=None):
    os.makedirs(out_dir, exist_ok=True)
    sd = {k: v.detach().to(torch.bfloat16) for k, v in model.state_dict().items()}
    write_safetensors(os.path.join(out_dir, "model.safetensors"), sd, {"format": "pt", **(extra_meta or {})})
    with open(os.path.join(out_dir, "config.json"), "w") as fh:
        json.dump(model.cfg.hf_dict(), fh, indent=2)
        fh.write("\n")
    shutil.copyfile(tokenizer_model, os.path.join(out_dir, "tokenizer.model"))


def export_adapter(adapted, out_dir, r, alpha, use_dora, target_modules, base_path):
    """adapted: dict module_path -> LoraLinear (see finetune.py)."""
    os.makedirs(out_dir, exist_ok=True)
    tensors = {}
    for path, mod in adapted.items():
        tensors[f"base_model.model.{path}.lora_A.weight"] = mod.lora_A.detach().float().clone()
        tensors[f"base_model.model.{path}.lora_B.weight"] = mod.lora_B.detach().float().clone()
        if use_dora:
            tensors[f"base_model.model.{path}.lora_magnitude_vector"] = mod.magnitude.detach().float().clone()
    write_safetensors(os.path.join(out_dir, "adapter_model.safetensors"), tensors, {"format": "pt"})
    cfg = {
        "alpha_pattern": {},
        "auto_mapping": None,
        "base_model_name_or_path": base_path,
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
        "init_lora_weights": True,
        "layers_pattern": None,
        "layers_to_transform": None,
        "lora_alpha": alpha,
        "lora_dropout": 0.0,
        "modules_to_save": None,
        "peft_type": "LORA",
        "r": r,
        "rank_pattern": {},
        "revision": None,
        "target_modules": sorted(target_modules),
        "task_type": "CAUSAL_LM",
        "use_dora": use_dora,
        "use_rslora": False,
    }
    with open(os.path.join(out_dir, "adapter_config.json"), "w") as fh:
        json.dump(cfg, fh, indent=2, sort_keys=True)
        fh.write("\n")


def read_safetensors_torch(path):
    """Small reader used by the trainer itself (check_export.py has its own, independent one)."""
    with open(path, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        header = json.loads(fh.read(n))
        data = fh.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = data[b:e]
        if info["dtype"] == "BF16":
            a = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            arr = a.view(np.float32)
        elif info["dtype"] == "F32":
            arr = np.frombuffer(raw, dtype="<f4")
        else:
            raise ValueError(info["dtype"])
        out[name] = torch.from_numpy(arr.reshape(info["shape"]).copy())
    return out
