#!/usr/bin/env python3
"""Reference logits from Hugging Face transformers for weft's parity checks (weft eval parity).

Loads a Hugging Face model directory in fp32 (TF32 off), runs one forward pass over input ids
and a greedy continuation, and writes reference.safetensors with the same tensors as
../shared/reference: input_ids int32 [T], logits fp32 [T, V], greedy_ids int32 [G] (a prompt,
then transformers' greedy continuation), with metadata prompt_len. Runs where torch and
transformers are installed (the GPU machine).

  hf_reference.py MODEL_DIR OUT.safetensors [--tokens T] [--prompt P] [--new N] [--seed S]
"""
import argparse
import json

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--tokens", type=int, default=32, help="positions of the logits pass")
    ap.add_argument("--prompt", type=int, default=8, help="prompt tokens before greedy")
    ap.add_argument("--new", type=int, default=24, help="greedy tokens")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_grad_enabled(False)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32).to(a.device).eval()
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(a.seed)
    ids = torch.randint(0, vocab, (1, a.tokens), generator=g)
    logits = model(ids.to(a.device)).logits[0].float().cpu()
    prompt = ids[:, : a.prompt].to(a.device)
    out = model.generate(prompt, max_new_tokens=a.new, do_sample=False, min_new_tokens=a.new,
                         eos_token_id=None, pad_token_id=0)
    save_file({"input_ids": ids[0].to(torch.int32).contiguous(),
               "logits": logits.contiguous(),
               "greedy_ids": out[0].to(torch.int32).cpu().contiguous()}, a.out,
              metadata={"made_with": "transformers fp32", "prompt_len": str(a.prompt),
                        "model": a.model})
    print(json.dumps({"out": a.out, "tokens": a.tokens, "vocab": vocab,
                      "greedy": out[0].tolist()[:40]}))


if __name__ == "__main__":
    main()
