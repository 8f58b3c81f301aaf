# Writes a Llama-3.2-1B-shaped GGUF with random weights (F32 or BF16 matrices, F32 norms, tied
# embeddings, no vocabulary: tokenizer.ggml.model "none"), the model bench_model builds in code,
# so that llama.cpp's llama-bench runs the same shapes beside it (bench/RESULTS.md, Zen 5, issue 33).
# The values are not bench_model's (a dense product's speed does not depend on them); standard
# library only.
#
#   python3 bench/llama_shaped_gguf.py bf16 /tmp/llama1b-bf16.gguf
#   llama-bench -m /tmp/llama1b-bf16.gguf -p 512 -n 64 -pg 512,64 -t 1,2 -r 3 -o json
import random, struct, sys
from array import array
if len(sys.argv) != 3 or sys.argv[1] not in ("f32", "bf16"):
    sys.exit("usage: llama_shaped_gguf.py f32|bf16 OUTPUT.gguf")
kind, path = sys.argv[1], sys.argv[2]
d, heads, kv, hd, layers, inner, vocab = 2048, 32, 8, 64, 16, 8192, 128256
ggtype, esize = {"f32": (0, 4), "bf16": (30, 2)}[kind]
def s(x): b = x.encode(); return struct.pack("<Q", len(b)) + b
kvs = [("general.architecture", 8, s("llama")), ("general.alignment", 4, struct.pack("<I", 32)),
       ("llama.context_length", 4, struct.pack("<I", 8192)), ("llama.embedding_length", 4, struct.pack("<I", d)),
       ("llama.block_count", 4, struct.pack("<I", layers)), ("llama.feed_forward_length", 4, struct.pack("<I", inner)),
       ("llama.attention.head_count", 4, struct.pack("<I", heads)), ("llama.attention.head_count_kv", 4, struct.pack("<I", kv)),
       ("llama.rope.freq_base", 6, struct.pack("<f", 500000.0)), ("llama.attention.layer_norm_rms_epsilon", 6, struct.pack("<f", 1e-5)),
       ("llama.rope.dimension_count", 4, struct.pack("<I", hd)), ("llama.vocab_size", 4, struct.pack("<I", vocab)),
       ("tokenizer.ggml.model", 8, s("none"))]
tensors = [("token_embd.weight", [d, vocab], True)]  # (ne0 = the row's length = in)
for l in range(layers):
    p = f"blk.{l}."
    tensors += [(p + "attn_norm.weight", [d], False), (p + "attn_q.weight", [d, heads * hd], True), (p + "attn_k.weight", [d, kv * hd], True),
                (p + "attn_v.weight", [d, kv * hd], True), (p + "attn_output.weight", [heads * hd, d], True), (p + "ffn_norm.weight", [d], False),
                (p + "ffn_gate.weight", [d, inner], True), (p + "ffn_up.weight", [d, inner], True), (p + "ffn_down.weight", [inner, d], True)]
tensors.append(("output_norm.weight", [d], False))
pad = lambda n: (n + 31) // 32 * 32
infos, offset = b"", 0
sizes = []
for name, dims, mat in tensors:
    n = 1
    for x in dims: n *= x
    t, e = (ggtype, esize) if mat else (0, 4)  # norms in F32, as converters write them
    infos += s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", x) for x in dims) + struct.pack("<I", t) + struct.pack("<Q", offset)
    sizes.append((n, e, mat)); offset = pad(offset + n * e)
header = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(s(k) + struct.pack("<I", t) + v for k, t, v in kvs) + infos
rng = random.Random(3)
block_f = array("f", [rng.gauss(0.0, 0.02) for _ in range(1 << 20)])
block = block_f.tobytes() if kind == "f32" else array("H", [x >> 16 for x in array("I", block_f.tobytes())]).tobytes()
ones = array("f", [1.0] * d).tobytes()
with open(path, "wb") as f:
    f.write(header); f.write(b"\0" * (pad(len(header)) - len(header)))
    written = 0
    for i, (n, e, mat) in enumerate(sizes):
        nbytes = n * e
        if not mat: f.write(ones)
        else:
            shift = (i * 4096) % len(block)
            rolled = block[shift:] + block[:shift]
            left = nbytes
            while left > 0:
                chunk = rolled[:min(left, len(rolled))]; f.write(chunk); left -= len(chunk)
        f.write(b"\0" * (pad(nbytes) - nbytes))
print(path, "written")
