#!/usr/bin/env python3
"""Writes the FakeForCausalLM checkpoint and its reference logits for the ABI end-to-end tests
(tests/unit/test_abi_engine.c, tests/abi/test_engine_fakes.sh), using only the standard library.

The model is fake.model's bigram graph: logits[t] = lm_head @ rmsnorm(embed[token_t]) * norm_w.
Weights are float32 values drawn from a seeded generator; the reference is computed in float64
from those float32 values, independently of weft's kernels, and written one row per token.

    python3 tools/scripts/abi_fake_model.py tests/data/abi
"""
import json
import math
import os
import random
import struct
import sys

VOCAB, HIDDEN, EPS = 16, 8, 1e-5
# The ids the tests score (every id once in a shuffled order, then repeats).
IDS = [3, 14, 0, 7, 9, 1, 12, 5, 10, 2, 15, 4, 8, 11, 6, 13, 3, 3, 0, 15]


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def main(out_dir):
    rng = random.Random(20261130)
    embed = [[f32(rng.uniform(-1.0, 1.0)) for _ in range(HIDDEN)] for _ in range(VOCAB)]
    norm = [f32(rng.uniform(0.5, 1.5)) for _ in range(HIDDEN)]
    head = [[f32(rng.uniform(-1.0, 1.0)) for _ in range(HIDDEN)] for _ in range(VOCAB)]
    tensors = [
        ("lm_head.weight", [VOCAB, HIDDEN], [v for row in head for v in row]),
        ("model.embed_tokens.weight", [VOCAB, HIDDEN], [v for row in embed for v in row]),
        ("model.norm.weight", [HIDDEN], norm),
    ]
    header, blobs, off = {}, [], 0
    for name, shape, vals in tensors:
        blob = struct.pack("<%df" % len(vals), *vals)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    header["__metadata__"] = {"format": "pt", "made_by": "tools/scripts/abi_fake_model.py"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((-len(text)) % 8)  # data starts 8-byte aligned, so the mmap binds in place
    model_dir = os.path.join(out_dir, "model")
    os.makedirs(model_dir, exist_ok=True)
    with open(os.path.join(model_dir, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    config = {
        "architectures": ["FakeForCausalLM"],
        "model_type": "fake",
        "vocab_size": VOCAB,
        "hidden_size": HIDDEN,
        "intermediate_size": 16,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "max_position_embeddings": 64,
        "rms_norm_eps": EPS,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
    }
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    with open(os.path.join(out_dir, "reference_logits.txt"), "w") as f:
        f.write("# FakeForCausalLM in float64 (tools/scripts/abi_fake_model.py): one row per id\n")
        f.write("# vocab %d ids %s\n" % (VOCAB, " ".join(str(i) for i in IDS)))
        for tok in IDS:
            x = embed[tok]
            inv = 1.0 / math.sqrt(sum(v * v for v in x) / HIDDEN + EPS)
            h = [x[d] * inv * norm[d] for d in range(HIDDEN)]
            row = [sum(head[v][d] * h[d] for d in range(HIDDEN)) for v in range(VOCAB)]
            f.write(" ".join("%.9g" % v for v in row) + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/abi")
