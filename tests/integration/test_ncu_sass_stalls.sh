#!/usr/bin/env bash
# tools/scripts/ncu-sass-stalls.py on a real source page (ncu's per-instruction warp-state
# samples of one launch of weft_add_rmsnorm_b in a Qwen3-8B decode step on the H200, 2026-12-03:
# tests/data/ncu) and on a hand-made one: the total equals the samples column's sum, every sample
# lands in exactly one stage, a warp waiting at a barrier (sampled on an instruction after it,
# reason stall_barrier) is charged to the stage before the barrier, and files without a sample
# table or unknown arguments are refused, naming them.
set -euo pipefail
tool=tools/scripts/ncu-sass-stalls.py
page=tests/data/ncu/qwen3-8b-weft_add_rmsnorm_b.csv.gz
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

python3 "$tool" "$page" --top 3 > "$tmp/out"
want=$(python3 - "$page" <<'PY'
import csv, gzip, sys
rows = list(csv.reader(gzip.open(sys.argv[1], "rt")))
head = rows[1]
col = head.index("Warp Stall Sampling (All Samples)")
print(sum(int(r[col] or 0) for r in rows[2:] if len(r) == len(head)))
PY
)
grep -q "^1080 instructions, $want samples$" "$tmp/out" || { echo "want $want"; cat "$tmp/out"; exit 1; }
# every sample in one stage: the stages' work and waiting add up to the total
got=$(awk '/: work / { for (i = 1; i <= NF; i++) { if ($i == "work") s += $(i + 1);
                                                   if ($i == "waiting") s += $(i + 1) } }
           END { print s }' "$tmp/out")
[ "$got" = "$want" ] || { echo "stages hold $got samples of $want"; cat "$tmp/out"; exit 1; }
[ "$(grep -c '^top 3 ' "$tmp/out")" = 1 ] && [ "$(grep -cE '^ +[0-9]+ 0x' "$tmp/out")" = 3 ] ||
    { cat "$tmp/out"; exit 1; }

# a hand-made page: stage 1 (instructions 0-1) works 4 samples, 6 samples of warps wait at its
# barrier (sampled on instruction 2); stage 2 (2-3) works 2
cat > "$tmp/page.csv" <<'CSV'
"Kernel Name","k",
"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","Instructions Executed","stall_barrier","stall_long_sb"
"0x0","      LDG.E R2, desc[UR4][R2.64]","4","4","8","0","4"
"0x10","      BAR.SYNC.DEFER_BLOCKING 0x0","0","0","8","0","0"
"0x20","      IADD3 R4, R2, 0x1, RZ","6","6","8","6","0"
"0x30","      FFMA R5, R4, R4, R5","2","1","8","0","2"
CSV
python3 "$tool" "$tmp/page.csv" > "$tmp/out"
grep -qE '^ +0\.\. +1 +8: work +4 .*waiting +6 .*long_sb 4' "$tmp/out" || { cat "$tmp/out"; exit 1; }
grep -qE '^ +2\.\. +3 +8: work +2 .*waiting +0 .*\| end' "$tmp/out" || { cat "$tmp/out"; exit 1; }

# refusals
echo "no table here" > "$tmp/none.csv"
if python3 "$tool" "$tmp/none.csv" 2> "$tmp/err"; then echo "accepted a file without samples"; exit 1; fi
grep -q "none.csv: no source table" "$tmp/err" || { cat "$tmp/err"; exit 1; }
if python3 "$tool" "$tmp/missing.csv" 2> "$tmp/err"; then echo "accepted a missing file"; exit 1; fi
grep -q "missing.csv" "$tmp/err" || { cat "$tmp/err"; exit 1; }
rc=0
python3 "$tool" "$page" --bogus 2> "$tmp/err" || rc=$?
[ "$rc" = 2 ] || { echo "--bogus: exit $rc"; exit 1; }
grep -q "unknown argument '--bogus'" "$tmp/err" || { cat "$tmp/err"; exit 1; }
echo "ncu-sass-stalls: ok"
