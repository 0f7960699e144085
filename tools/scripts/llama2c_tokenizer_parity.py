#!/usr/bin/env python3
"""Makes tests/data/files/tok512_hf_encodings.json: texts encoded by Hugging Face `tokenizers`
with the tokenizer.json that `weft convert llama2c` wrote for tok512.bin. It also runs a
plain-Python port of llama2.c's encoder over the same texts and reports any difference, so the
stored file is only written when HF BPE with our derived merges reproduces llama2.c.
usage: llama2c_tokenizer_parity.py CONVERTED_DIR TOK512.bin OUT.json   (needs: pip install tokenizers)"""
import json, struct, sys
from tokenizers import Tokenizer

TEXTS = [
    "Once upon a time, there was a little girl named Lily.",
    "She loved to play outside in the park with her mom.",
    "Tim and Lily were best friends. They said \"hello\" and smiled!",
    "the theme there then thee",
    "  two leading spaces and   three inside",
    "Ümlaut, café, naïve — “quotes” … 3+4=7? [ok] ~50% $5 & more",
    "emoji 🙂 and 漢字 fall back to bytes",
    "\ttab\nnewline\r\n",
    "a",
    " ",
    "aaaa bbbb abab baba",
    "Happy happy HAPPY hap-py happ y",
    "Lily's mom said, 'Don't go!' He went anyway.",
    "Timmy Tim Ti T",
    "0123456789 1,000,000.50",
    "<s> </s> <unk> <0x41> are plain text here",
]

def llama2c_encode(pieces, scores, text):
    lookup = {p: i for i, p in enumerate(pieces)}
    ids = [lookup[b" "]] if text else []
    for ch in text:
        b = ch.encode("utf-8")
        if b in lookup:
            ids.append(lookup[b])
        else:
            ids.extend(x + 3 for x in b)
    while True:
        best, at, best_id = None, -1, -1
        for i in range(len(ids) - 1):
            m = lookup.get(pieces[ids[i]] + pieces[ids[i + 1]])
            if m is not None and (best is None or scores[m] > best):
                best, at, best_id = scores[m], i, m
        if best is None:
            return ids
        ids[at:at + 2] = [best_id]

def main():
    conv, tokbin, out = sys.argv[1:4]
    d = open(tokbin, "rb").read()
    o = 4
    pieces, scores = [], []
    while o < len(d):
        s, n = struct.unpack_from("<fi", d, o)
        pieces.append(d[o + 8:o + 8 + n])
        scores.append(s)
        o += 8 + n
    tok = Tokenizer.from_file(conv + "/tokenizer.json")
    # llama2.c never parses "<s>" written in text as a special token; ask HF not to either.
    tok.encode_special_tokens = True
    cases, bad = [], 0
    for t in TEXTS:
        hf = tok.encode(t).ids
        assert hf[0] == 1, "the template must add <s>"
        hf = hf[1:]
        ref = llama2c_encode(pieces, scores, t)
        if hf != ref:
            bad += 1
            print("DIFF %r\n  hf      %s\n  llama2c %s" % (t, hf, ref))
        dec = tok.decode(tok.encode(t).ids, skip_special_tokens=True)
        if dec != t:
            print("decode differs for %r: %r" % (t, dec))
        cases.append({"text": t, "ids": hf})
    if bad:
        sys.exit("%d texts differ; not writing %s" % (bad, out))
    json.dump(cases, open(out, "w"), ensure_ascii=False, indent=1)
    print("%d texts agree; wrote %s" % (len(cases), out))

main()
