#!/usr/bin/env python3
"""Checks a converted Llama directory against a transformers reference without numpy or torch:
a plain-Python forward pass (HF half-split RoPE, GQA, SwiGLU, RMSNorm) over the first N tokens of
reference.safetensors' input_ids, compared with its logits. Used to validate `weft convert
llama2c` (a wrong q/k row permutation shows up as large logit differences).
usage: check_llama_forward.py MODEL_DIR REFERENCE.safetensors [N]"""
import json, math, struct, sys

def load_st(path):
    data = open(path, "rb").read()
    n, = struct.unpack_from("<Q", data, 0)
    hdr = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in hdr.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        fmt = {"F32": "f", "I32": "i"}[t["dtype"]]
        vals = struct.unpack_from("<%d%s" % ((e - b) // 4, fmt), data, base + b)
        out[name] = (t["shape"], vals)
    return out

def rows(t):
    shape, v = t
    if len(shape) == 1:
        return list(v)
    c = shape[1]
    return [v[r * c:(r + 1) * c] for r in range(shape[0])]

def matvec(w, x):
    return [sum(a * b for a, b in zip(r, x)) for r in w]

def rmsnorm(x, w, eps):
    s = 1.0 / math.sqrt(sum(a * a for a in x) / len(x) + eps)
    return [a * s * g for a, g in zip(x, w)]

def main():
    mdir, ref = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 6
    cfg = json.load(open(mdir + "/config.json"))
    W = {k: rows(v) for k, v in load_st(mdir + "/model.safetensors").items()}
    R = load_st(ref)
    ids = R["input_ids"][1][:n]
    V = R["logits"][0][1]
    logits_ref = R["logits"][1]
    D, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    H, KVH = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or D // H
    eps = cfg["rms_norm_eps"]
    theta = cfg.get("rope_theta") or cfg["rope_parameters"]["rope_theta"]
    head = W.get("lm_head.weight", W["model.embed_tokens.weight"])
    kc = [[] for _ in range(L)]
    vc = [[] for _ in range(L)]
    worst = 0.0
    for pos, tok in enumerate(ids):
        x = list(W["model.embed_tokens.weight"][tok])
        for l in range(L):
            p = "model.layers.%d." % l
            h = rmsnorm(x, W[p + "input_layernorm.weight"], eps)
            q = matvec(W[p + "self_attn.q_proj.weight"], h)
            k = matvec(W[p + "self_attn.k_proj.weight"], h)
            v = matvec(W[p + "self_attn.v_proj.weight"], h)
            def rope(vec, nh):
                out = list(vec)
                for hh in range(nh):
                    for i in range(hd // 2):
                        f = pos / theta ** (2 * i / hd)
                        c, s = math.cos(f), math.sin(f)
                        a, b = vec[hh * hd + i], vec[hh * hd + i + hd // 2]
                        out[hh * hd + i] = a * c - b * s
                        out[hh * hd + i + hd // 2] = b * c + a * s
                return out
            q, k = rope(q, H), rope(k, KVH)
            kc[l].append(k)
            vc[l].append(v)
            att = []
            for hh in range(H):
                g = hh // (H // KVH)
                qs = q[hh * hd:(hh + 1) * hd]
                sc = [sum(a * b for a, b in zip(qs, kk[g * hd:(g + 1) * hd])) / math.sqrt(hd)
                      for kk in kc[l]]
                m = max(sc)
                e = [math.exp(s - m) for s in sc]
                z = sum(e)
                att += [sum(e[t] / z * vc[l][t][g * hd + d] for t in range(len(e)))
                        for d in range(hd)]
            x = [a + b for a, b in zip(x, matvec(W[p + "self_attn.o_proj.weight"], att))]
            h = rmsnorm(x, W[p + "post_attention_layernorm.weight"], eps)
            gt = matvec(W[p + "mlp.gate_proj.weight"], h)
            up = matvec(W[p + "mlp.up_proj.weight"], h)
            act = [a / (1 + math.exp(-a)) * b for a, b in zip(gt, up)]
            x = [a + b for a, b in zip(x, matvec(W[p + "mlp.down_proj.weight"], act))]
        x = rmsnorm(x, W["model.norm.weight"], eps)
        lg = matvec(head, x)
        ref_row = logits_ref[pos * V:(pos + 1) * V]
        d = max(abs(a - b) for a, b in zip(lg, ref_row))
        worst = max(worst, d)
        print("pos %d token %d: max |logit diff| %.3g" % (pos, tok, d))
    print("worst %.3g" % worst)
    sys.exit(0 if worst < 1e-3 else 1)

main()
