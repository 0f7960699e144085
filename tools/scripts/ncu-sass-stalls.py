#!/usr/bin/env python3
"""Where one kernel launch's warps wait, from ncu's source page (SASS with warp-state samples).

Input: the CSV that `ncu -i REPORT --page source --print-source sass --csv` prints (written by
tools/scripts/ncu-stalls.sh with WEFT_NCU_SOURCE). Prints the instructions holding the most
samples, then the code cut at every block or cluster barrier into stages: each stage's samples
outside the barrier (warps working or waiting on their own operands) and at the barrier that
ends it (warps that arrived and wait for the rest), so a stage's length shows as the samples of
the warps that wait for it.

Usage: ncu-sass-stalls.py FILE.csv[.gz] [--top N]
"""
import csv
import gzip
import sys


def num(s):
    try:
        return float(s.replace(",", ""))
    except (AttributeError, ValueError):
        return None


def main():
    args = sys.argv[1:]
    top, path = 30, None
    while args:
        a = args.pop(0)
        if a == "--top" and args and args[0].isdigit():
            top = int(args.pop(0))
        elif a.startswith("-") or path is not None:
            print(f"ncu-sass-stalls: unknown argument '{a}' (usage: FILE.csv[.gz] [--top N])",
                  file=sys.stderr)
            return 2
        else:
            path = a
    if path is None:
        print("ncu-sass-stalls: usage: FILE.csv[.gz] [--top N]", file=sys.stderr)
        return 2
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt", newline="", encoding="utf-8", errors="replace") as f:
            rows = list(csv.reader(f))
    except (OSError, EOFError) as e:
        print(f"{path}: {e}", file=sys.stderr)
        return 1
    hi = next((i for i, r in enumerate(rows) if "Source" in r and any("Sampl" in c for c in r)),
              None)
    if hi is None:
        print(f"{path}: no source table with warp-state samples (ncu's source page, --csv)",
              file=sys.stderr)
        return 1
    head = rows[hi]
    src = head.index("Source")
    addr = head.index("Address") if "Address" in head else None
    allc = next((i for i, c in enumerate(head) if "Sampling (All" in c), None)
    notc = next((i for i, c in enumerate(head) if "Not-issued" in c or "Not Issued" in c), None)
    body = [r for r in rows[hi + 1:] if len(r) == len(head)]
    if allc is None or not body:
        print(f"{path}: no instructions with a samples column", file=sys.stderr)
        return 1
    samples = [num(r[allc]) or 0.0 for r in body]
    total = sum(samples)
    print(f"{len(body)} instructions, {total:.0f} samples")
    order = sorted(range(len(body)), key=lambda i: -samples[i])
    print(f"top {top} (index, address, samples, share, not issued, instruction):")
    for i in order[:top]:
        ni = num(body[i][notc]) if notc is not None else None
        a = body[i][addr] if addr is not None else ""
        print(f"  {i:5d} {a:>8} {samples[i]:8.0f} {100 * samples[i] / total:5.1f}% "
              f"{'' if ni is None else f'{ni:8.0f}'}  {body[i][src].strip()[:90]}")
    # stages between barriers. A warp waiting at a barrier (BAR.SYNC.DEFER_BLOCKING, the
    # cluster barrier's wait) is sampled with the reason stall_barrier on an instruction after
    # it, so those samples belong to the stage before the barrier: the warps that finished it
    # early waiting for the rest. The other samples are a stage's own work.
    reasons = [i for i, c in enumerate(head) if c.startswith("stall_") and "Not Issued" not in c]
    bar = head.index("stall_barrier") if "stall_barrier" in head else None
    exe = head.index("Instructions Executed") if "Instructions Executed" in head else None
    # [first, last, executions of its most-run instruction (about the warps that ran it, times
    # its loop trips), work samples, waiting samples, reasons, op]
    stages = []
    cur = [0, 0, 0, 0.0, 0.0, {}, ""]
    for i, r in enumerate(body):
        op = r[src].strip()
        b = (num(r[bar]) or 0.0) if bar is not None else 0.0
        if b and stages:
            stages[-1][4] += b
        else:
            cur[4] += b
        cur[3] += samples[i] - b
        if exe is not None:
            cur[2] = max(cur[2], int(num(r[exe]) or 0))
        for j in reasons:
            if head[j] != "stall_barrier":
                cur[5][head[j]] = cur[5].get(head[j], 0.0) + (num(r[j]) or 0.0)
        if "BAR" in op.split(";")[0] and ("SYNC" in op or "WAIT" in op or "ARV" in op):
            cur[1], cur[6] = i, op
            stages.append(cur)
            cur = [i + 1, 0, 0, 0.0, 0.0, {}, ""]
    cur[1], cur[6] = len(body) - 1, "end"
    stages.append(cur)
    print("stages, cut at each barrier (instructions from..to, executions of its most-run "
          "instruction, samples of the stage's own work, of warps waiting at its end, top reasons "
          "of the work):")
    for first, last, execd, work, wait, why, op in stages:
        if not execd and not work and not wait:
            continue
        most = sorted(why.items(), key=lambda kv: -kv[1])[:3]
        print(f"  {first:5d}..{last:5d} {execd:6d}: work {work:6.0f} ({100 * work / total:4.1f}%), "
              f"waiting {wait:6.0f} ({100 * wait / total:4.1f}%)  "
              f"{', '.join(f'{k[6:]} {v:.0f}' for k, v in most)}  | {op[:34]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
