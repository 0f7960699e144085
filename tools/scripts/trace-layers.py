#!/usr/bin/env python3
"""The cuda backend's decode trace (option trace) summed by position in the repeating layer.

The backend prints the last replay of a decode step kernel by kernel ("  12 weft_gemv_1   3.15 us",
cuda_trace.c). A decoder's layers launch the same kernels in the same order, so the sequence
repeats with the layer's kernel count as its period. This finds the shortest period that most
of the sequence follows, the first kernel where the repeats begin, and prints each position's
mean, least and largest time over the layers, the layer's sum, and what runs before the first
and after the last whole layer. With --bytes-gbs R and --bytes "POS:MB ..." (positions in the
layer, megabytes of weights) it also prints each listed position's time at R GB/s beside it.

Usage: trace-layers.py LOG [--bytes-gbs R --bytes "0:50.3 2:33.5 ..."]
"""
import re
import sys

LINE = re.compile(r"^\s+(\d+) (\S+)\s+([0-9.]+) us$")


def parse(path):
    rows = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = LINE.match(line.rstrip("\n"))
            if m:
                rows.append((int(m.group(1)), m.group(2), float(m.group(3))))
    # a log may hold several traces: keep the last (its indices restart at 0)
    start = max((i for i, r in enumerate(rows) if r[0] == 0), default=0)
    return [(n, t) for _, n, t in rows[start:]]


def period(names):
    """(p, offset, repeats): the shortest p whose whole repeats of names[offset:] are at least
    three and cover at least 80% of the kernels, or None"""
    k = len(names)
    for p in range(2, k // 3 + 1):
        for off in range(0, p):
            first, reps = names[off:off + p], 0
            while off + (reps + 1) * p <= k and names[off + reps * p:off + (reps + 1) * p] == first:
                reps += 1
            if reps >= 3 and reps * p >= 0.8 * k:
                return p, off, reps
    return None


def main(argv):
    if not argv or argv[0].startswith("-"):
        sys.exit(__doc__)
    path, opts = argv[0], argv[1:]
    gbs, mb = None, {}
    while opts:
        if opts[0] == "--bytes-gbs" and len(opts) > 1:
            gbs = float(opts[1])
        elif opts[0] == "--bytes" and len(opts) > 1:
            for item in opts[1].split():
                pos, _, val = item.partition(":")
                mb[int(pos)] = float(val)
        else:
            sys.exit(f"trace-layers.py: unknown argument {opts[0]!r}\n{__doc__}")
        opts = opts[2:]
    rows = parse(path)
    if not rows:
        sys.exit(f"{path}: no kernel lines of a cuda trace (\"  N name  T us\")")
    names = [n for n, _ in rows]
    found = period(names)
    if not found:
        sys.exit(f"{path}: {len(rows)} kernels and no repeating layer of at least three repeats")
    p, off, reps = found
    print(f"{len(rows)} kernels: {off} before the layers, {reps} layers of {p}, "
          f"{len(rows) - off - reps * p} after")
    total = 0.0
    for j in range(p):
        ts = [rows[off + r * p + j][1] for r in range(reps)]
        mean = sum(ts) / len(ts)
        total += mean
        extra = ""
        if gbs and j in mb:
            floor = mb[j] * 1e6 / (gbs * 1e9) * 1e6
            extra = f"  bytes {floor:7.2f} us, +{mean - floor:.2f}"
        print(f"  {j:3d} {names[off + j]:<36} mean {mean:8.2f}  min {min(ts):8.2f}  "
              f"max {max(ts):8.2f}{extra}")
    print(f"  layer {total:.2f} us (sum of the means)")
    for what, part in (("before", rows[:off]), ("after", rows[off + reps * p:])):
        if part:
            print(f"  {what}: " + ", ".join(f"{n} {t:.2f}" for n, t in part))


if __name__ == "__main__":
    main(sys.argv[1:])
