#!/usr/bin/env python3
"""Sums one decode step of an `ncu --csv --metrics gpu__time_duration.sum` log by kernel.

The step is the span between the last two weft_embed launches (each decode step starts with the
token embedding). Prints kernels per step, the summed time, and per kernel name the count, total
and mean in microseconds, largest first. Usage: ncu-kernels.py LOG.csv
"""
import csv
import sys


def main(path):
    lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
    head = [i for i, line in enumerate(lines) if line.startswith('"ID"')]
    if not head:
        sys.exit(f"{path}: no ncu csv table (no line starting with \"ID\")")
    rows = list(csv.reader(lines[head[0]:]))
    h = rows[0]
    ki, vi, ui = h.index("Kernel Name"), h.index("Metric Value"), h.index("Metric Unit")
    scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6}
    data = []
    for r in rows[1:]:
        if len(r) <= vi:
            continue
        data.append((r[ki].split("(")[0], float(r[vi].replace(",", "")) * scale.get(r[ui], 1e-3)))
    starts = [i for i, (n, _) in enumerate(data) if "embed" in n]
    if len(starts) < 2:
        sys.exit(f"{path}: fewer than two weft_embed launches, no whole step to sum")
    step = data[starts[-2]:starts[-1]]
    print(f"kernels per step {len(step)}, sum {sum(v for _, v in step):.1f} us (each alone)")
    by = {}
    for n, v in step:
        c = by.setdefault(n, [0, 0.0])
        c[0] += 1
        c[1] += v
    for n, (k, v) in sorted(by.items(), key=lambda x: -x[1][1]):
        print(f"  {n:40s} {k:4d} {v:9.1f} us {v / k:7.2f} each")


if __name__ == "__main__":
    main(sys.argv[1])
