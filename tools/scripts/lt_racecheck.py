#!/usr/bin/env python3
"""cuBLASLt's own bf16 GEMMs at the prefill shapes of weft's batch-1 models, with no weft code.

Run under `compute-sanitizer --tool racecheck` (gpu-check.sh sanitize does) to tell whether a
hazard racecheck reports inside an nvjet_* kernel during a weft prefill also appears when
PyTorch calls the same library on the same shapes. Each product is x[T, K] @ w[N, K]^T in bf16,
as weft's prefill does it (tokens by input features against row-major weights). Prints the
shapes it ran and a checksum of each result so the products cannot be optimised away.
"""
import argparse
import sys

# (model, product, K, N): the real configs' projections (models/configs/*.json)
SHAPES = {
    "Qwen3-0.6B": [("qkv", 1024, 4096), ("o", 2048, 1024), ("gate_up", 1024, 6144),
                   ("down", 3072, 1024)],
    "Llama-3.2-1B": [("qkv", 2048, 3072), ("o", 2048, 2048), ("gate_up", 2048, 16384),
                     ("down", 8192, 2048)],
    "Qwen3-8B": [("qkv", 4096, 6144), ("o", 4096, 4096), ("gate_up", 4096, 24576),
                 ("down", 12288, 4096)],
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=128, help="prompt length T (default 128)")
    ap.add_argument("--models", default=",".join(SHAPES), help="comma-separated model names")
    a = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("lt_racecheck: no CUDA device", file=sys.stderr)
        return 2
    torch.manual_seed(1)
    for model in a.models.split(","):
        if model not in SHAPES:
            print(f"lt_racecheck: --models: unknown model '{model}'", file=sys.stderr)
            return 2
        for name, k, n in SHAPES[model]:
            x = torch.randn(a.tokens, k, dtype=torch.bfloat16, device="cuda")
            w = torch.randn(n, k, dtype=torch.bfloat16, device="cuda") * (k ** -0.5)
            y = torch.nn.functional.linear(x, w)
            torch.cuda.synchronize()
            print(f"{model} {name}: [{a.tokens}x{k}] x [{n}x{k}]^T sum {y.float().sum().item():.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
