#!/usr/bin/env python3
"""Writes the fuzzers' seed corpora (small valid and malformed inputs) into fuzz/seeds/.

The seeds are committed; run this again only to change them. Standard library only.
Each safetensors seed is a tiny GPT-2 layer (n_embd 4) in one dtype, or one malformation of it,
kept small so that libFuzzer mutates headers rather than megabytes of weights.
"""
import json
import math
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "U8": 1, "BOOL": 1}


def encode(dtype, values):
    if dtype == "F64":
        return b"".join(struct.pack("<d", v) for v in values)
    if dtype == "F32":
        return b"".join(struct.pack("<f", v) for v in values)
    if dtype == "F16":
        return b"".join(struct.pack("<e", v) for v in values)
    if dtype == "BF16":
        return b"".join(struct.pack("<f", v)[2:] for v in values)
    if dtype in ("I64", "I32"):
        return b"".join(struct.pack("<q" if dtype == "I64" else "<i", int(v)) for v in values)
    return bytes(int(v) & 1 for v in values)


def safetensors(tensors, metadata=None, header_override=None):
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, (dtype, shape) in tensors.items():
        count = math.prod(shape)
        raw = encode(dtype, [((i * 7) % 11 - 5) / 10 for i in range(count)])
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header_override if header_override is not None else header).encode()
    return struct.pack("<Q", len(text)) + text + data


def gpt2_layer(dtype, prefix=""):
    p = prefix + "h.0.attn."
    return {p + "c_attn.weight": (dtype, [4, 12]), p + "c_attn.bias": (dtype, [12]),
            p + "c_proj.weight": (dtype, [4, 4]), p + "c_proj.bias": (dtype, [4])}


def write(folder, name, data):
    os.makedirs(os.path.join(HERE, folder), exist_ok=True)
    with open(os.path.join(HERE, folder, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def main():
    s = "seeds/safetensors"
    for dtype in ("F32", "F64", "F16", "BF16"):
        write(s, f"gpt2-layer-{dtype.lower()}.safetensors", safetensors(gpt2_layer(dtype), {"format": "pt"}))
    write(s, "gpt2-layer-prefixed.safetensors", safetensors(gpt2_layer("F32", "transformer.")))
    two = gpt2_layer("F32")
    two.update({k.replace("h.0.", "h.1."): v for k, v in gpt2_layer("F32").items()})
    write(s, "gpt2-two-layers.safetensors", safetensors(two))
    write(s, "heads-3d.safetensors", safetensors({"pattern": ("F64", [2, 3, 3]), "ids": ("I64", [3]),
                                                  "mask": ("BOOL", [3, 3]), "scalar": ("F32", [])}))
    write(s, "rank-4.safetensors", safetensors({"attn.bias": ("U8", [1, 1, 4, 4]), "empty": ("F32", [0, 4])}))
    good = safetensors(gpt2_layer("F32"))
    write(s, "empty.safetensors", b"")
    write(s, "short-length.safetensors", b"\x08\x00\x00")
    write(s, "header-past-end.safetensors", struct.pack("<Q", 1000) + b"{}")
    write(s, "header-not-json.safetensors", struct.pack("<Q", 8) + b"not json")
    write(s, "truncated-data.safetensors", good[: len(good) - 40])
    bad = {"t": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}}
    write(s, "shape-size-mismatch.safetensors", safetensors({}, header_override=bad) + bytes(12))
    bad = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
           "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}
    write(s, "overlapping-offsets.safetensors", safetensors({}, header_override=bad) + bytes(12))
    bad = {"t": {"dtype": "F33", "shape": [1], "data_offsets": [0, 4]}}
    write(s, "unknown-dtype.safetensors", safetensors({}, header_override=bad) + bytes(4))

    c = "seeds/gpt2_config"
    write(c, "gpt2.json", json.dumps({"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12}))
    write(c, "tiny.json", json.dumps({"n_embd": 4, "n_head": 2}))
    write(c, "not-divisible.json", json.dumps({"n_embd": 10, "n_head": 3}))
    write(c, "float-field.json", json.dumps({"n_embd": 768.0, "n_head": 12}))
    write(c, "negative.json", json.dumps({"n_embd": -768, "n_head": 12}))
    write(c, "array.json", "[768, 12]")


if __name__ == "__main__":
    main()
