#!/usr/bin/env bash
# tools/scripts/gpu-check.sh's with_options, which writes the variants of a kernel A/B (a
# manifest with a map of backend options merged in): a key the manifest already sets takes the
# map's value instead of appearing twice (which the manifest parser refuses), new keys are
# appended, a plain `backend: cuda` gets the map, a map over two lines is taken as one, a manifest
# with no cuda backend is refused, and '-' copies the manifest unchanged; and its drop_technique,
# which takes one technique out of a candidate's list for an ablation. Where
# the build has the cuda plugin, each result is frozen with `weft candidate freeze` (no GPU
# needed) and the lock holds the merged values.
set -euo pipefail
build=${1:?usage: test_gpu_check_options.sh BUILD_DIR}
weft="$build/bin/weft"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# the functions alone, as the script defines them
: > "$tmp/fn.sh"
for fn in with_options drop_technique race_owners ablations; do
    sed -n "/^$fn() {/,/^}/p" tools/scripts/gpu-check.sh >> "$tmp/fn.sh"
    grep -q "^$fn() {" "$tmp/fn.sh" || { echo "$fn not found in gpu-check.sh"; exit 1; }
done
# shellcheck source=/dev/null
source "$tmp/fn.sh"

# race_owners: racecheck's hazards split by the kernel they fall in, in compute-sanitizer's
# report form; weft's own kernels (weft_*) give a FAIL line, the libraries' are listed apart
summary=()
note() { summary+=("$1"); }
cat > "$tmp/race.log" <<'LOG'
========= Error: Race reported between Read access at nvjet_sm90_tst_24x64_64x16_4x2_h_bz_TNN+0xb00
=========     and Write access at nvjet_sm90_tst_24x64_64x16_4x2_h_bz_TNN+0xa80 [16 hazards]
========= Error: Race reported between Write access at weft_rope_attention_cl+0x1f0
=========     and Read access at weft_rope_attention_cl+0x2a0 [4 hazards]
========= RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)
LOG
race_owners "$tmp/race.log"
[ "${#summary[@]}" = 2 ] || { printf '%s\n' "${summary[@]}"; echo "race_owners: 2 lines"; exit 1; }
[ "${summary[0]}" = "FAIL   racecheck hazards in weft kernels: weft_rope_attention_cl 2; " ] ||
    { echo "race_owners, weft line: ${summary[0]}"; exit 1; }
grep -q "library kernels.*nvjet_sm90_tst_24x64_64x16_4x2_h_bz_TNN 2; " <<< "${summary[1]}" ||
    { echo "race_owners, library line: ${summary[1]}"; exit 1; }
summary=()
grep -v weft_ "$tmp/race.log" > "$tmp/race-lib.log"
race_owners "$tmp/race-lib.log"
[ "${#summary[@]}" = 1 ] && ! grep -q FAIL <<< "${summary[0]}" ||
    { echo "race_owners: library-only hazards gave: ${summary[*]}"; exit 1; }
summary=()
echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)" > "$tmp/race-0.log"
race_owners "$tmp/race-0.log"
[ "${#summary[@]}" = 0 ] || { echo "race_owners: a clean log gave: ${summary[*]}"; exit 1; }
summary=()
echo "========= RACECHECK SUMMARY: 3 hazards displayed (3 errors, 0 warnings)" > "$tmp/race-3.log"
race_owners "$tmp/race-3.log"
[ "${#summary[@]}" = 1 ] && grep -q "^FAIL.*3 hazards, no kernel named" <<< "${summary[0]}" ||
    { echo "race_owners: hazards without kernel names gave: ${summary[*]}"; exit 1; }

nl=manifests/fast-cuda-async-loop-nl.yaml
grep -q "^backend: {name: cuda, options: {.*attn_cp: 3" "$nl" ||
    { echo "$nl no longer sets attn_cp: 3 (this test's premise)"; exit 1; }
with_options "$nl" "{attn_cp: 0, gemv_loop: 4, trace: true}" > "$tmp/merged.yaml"
line=$(grep "^backend:" "$tmp/merged.yaml")
[ "$(grep -o "attn_cp:" <<< "$line" | wc -l)" = 1 ] || { echo "attn_cp twice: $line"; exit 1; }
[ "$(grep -o "gemv_loop:" <<< "$line" | wc -l)" = 1 ] || { echo "gemv_loop twice: $line"; exit 1; }
grep -q "attn_cp: 0" <<< "$line" || { echo "attn_cp not replaced: $line"; exit 1; }
grep -q "gemv_loop: 4" <<< "$line" || { echo "gemv_loop not replaced: $line"; exit 1; }
grep -q "gemv_xsmem: 3" <<< "$line" || { echo "an untouched key was lost: $line"; exit 1; }
grep -q "trace: true" <<< "$line" || { echo "a new key was not added: $line"; exit 1; }
# nothing but the backend line changes
diff <(grep -v "^backend:" "$nl") <(grep -v "^backend:" "$tmp/merged.yaml")

with_options manifests/baseline-cuda.yaml "{trace: true}" > "$tmp/plain.yaml"
grep -qx "backend: {name: cuda, options: {trace: true}}" "$tmp/plain.yaml" ||
    { grep "^backend" "$tmp/plain.yaml"; exit 1; }

# a backend map continued on the next line (fast-cuda-async-smem-loop's form) takes the map too:
# the previous form matched one line only and passed such a manifest through unchanged, so every
# option map given with it was silently dropped
ml=manifests/fast-cuda-async-smem-loop.yaml
[ "$(sed -n '/^backend: {/,/}}$/p' "$ml" | wc -l)" -gt 1 ] ||
    { echo "$ml's backend map fits one line now (this check's premise)"; exit 1; }
with_options "$ml" "{trace: true, gemv_loop: 4}" > "$tmp/multi.yaml"
line=$(grep "^backend:" "$tmp/multi.yaml")
grep -q "trace: true" <<< "$line" || { echo "multi-line map: trace not added: $line"; exit 1; }
grep -q "gemv_loop: 4" <<< "$line" ||
    { echo "multi-line map: gemv_loop not replaced: $line"; exit 1; }
[ "$(grep -o "gemv_loop:" <<< "$line" | wc -l)" = 1 ] || { echo "gemv_loop twice: $line"; exit 1; }
grep -q "attn_smem_min: 120" <<< "$line" ||
    { echo "multi-line map: the second line's key was lost: $line"; exit 1; }
diff <(sed '/^backend: {/,/}}$/d' "$ml") <(grep -v "^backend:" "$tmp/multi.yaml")
# a manifest with no cuda backend to take the map is an error naming it, not a silent copy
printf 'format: 1\ncandidate: x\nmodel: stories260k\nbackend: cpu\n' > "$tmp/cpu.yaml"
if with_options "$tmp/cpu.yaml" "{trace: true}" > "$tmp/cpu-out.yaml" 2> "$tmp/cpu.err"; then
    echo "with_options applied a map to a manifest without a cuda backend"; exit 1
fi
grep -q "cpu.yaml" "$tmp/cpu.err" || { cat "$tmp/cpu.err"; exit 1; }

# drop_technique (the issue8 phase's ablations): exactly the named entry goes, a plain name or
# a {name: ..., options: ...} map, from a list over two lines; a name that only prefixes others
# or is absent is an error, and the manifest is not rewritten then
all=manifests/fast-cuda-all.yaml
techs() { # a manifest's techniques list on one line
    python3 -c 'import re, sys
t = open(sys.argv[1]).read()
m = re.search(r"^techniques: *\[(.*?)\]\n[a-z]", t, re.S | re.M)
print(re.sub(r"\s+", " ", m.group(1)))' "$1"
}
drop_technique fuse.swiglu "$all" "$tmp/no-swiglu.yaml"
left=$(techs "$tmp/no-swiglu.yaml")
grep -q "fuse.swiglu" <<< "$left" && { echo "fuse.swiglu still listed: $left"; exit 1; }
grep -q "fuse.qkv-rope" <<< "$left" || { echo "a neighbour went too: $left"; exit 1; }
grep -q "{name: fuse.rope-attention, options: {merge: cluster}}" <<< "$left" ||
    { echo "the map entry was damaged: $left"; exit 1; }
drop_technique fuse.rope-attention "$tmp/no-swiglu.yaml" "$tmp/no-two.yaml"
left=$(techs "$tmp/no-two.yaml")
grep -q "rope-attention\|merge: cluster" <<< "$left" &&
    { echo "map entry not dropped: $left"; exit 1; }
orig="fuse.merged-projections, fuse.rmsnorm-residual, fuse.qkv-rope, fuse.swiglu, \
{name: fuse.rope-attention, options: {merge: cluster}}, exec.cuda-graph, exec.device-sampling"
[ "$(techs "$all")" = "$orig" ] || { echo "$all's list changed (this check's premise)"; exit 1; }
[ "$left" = "fuse.merged-projections, fuse.rmsnorm-residual, fuse.qkv-rope, exec.cuda-graph, \
exec.device-sampling" ] || { echo "not exactly the two entries dropped: $left"; exit 1; }
diff <(sed '/^techniques:/,/]$/d' "$all") <(sed '/^techniques:/d' "$tmp/no-two.yaml")
for bad in fuse fuse.nothing; do
    cp "$all" "$tmp/keep.yaml"
    if drop_technique "$bad" "$tmp/keep.yaml" "$tmp/keep.yaml" 2> "$tmp/drop.err"; then
        echo "drop_technique $bad succeeded on a list without it"; exit 1
    fi
    grep -q "0 entries named $bad" "$tmp/drop.err" || { cat "$tmp/drop.err"; exit 1; }
    cmp "$all" "$tmp/keep.yaml"
done

# ablations: one manifest an entry (a + entry drops all it names) and without-all.yaml with each
# named technique gone once, though two entries name fuse.rope-attention (the list Qwen3-8B's
# leave-one-out used: its first run stopped with "0 entries named fuse.rope-attention" when the
# pair's second drop met a without-all that had lost it already)
mkdir "$tmp/abl"
ablations "$all" "$tmp/abl" fuse.swiglu fuse.rope-attention fuse.qkv-rope+fuse.rope-attention
[ "$(techs "$tmp/abl/without-fuse.swiglu.yaml")" = "$(techs "$tmp/no-swiglu.yaml")" ] ||
    { echo "ablations: without-fuse.swiglu differs from drop_technique's"; exit 1; }
left=$(techs "$tmp/abl/without-fuse.qkv-rope+fuse.rope-attention.yaml")
[ "$left" = "fuse.merged-projections, fuse.rmsnorm-residual, fuse.swiglu, exec.cuda-graph, \
exec.device-sampling" ] || { echo "ablations: the pair's manifest: $left"; exit 1; }
[ "$(techs "$tmp/abl/without-all.yaml")" = "fuse.merged-projections, fuse.rmsnorm-residual, \
exec.cuda-graph, exec.device-sampling" ] ||
    { echo "ablations: without-all: $(techs "$tmp/abl/without-all.yaml")"; exit 1; }
[ "$(ls "$tmp/abl" | wc -l)" = 4 ] || { ls "$tmp/abl"; exit 1; }
if ablations "$all" "$tmp/abl" fuse.nothing 2> "$tmp/abl.err"; then
    echo "ablations of a technique the candidate lacks succeeded"; exit 1
fi
grep -q "0 entries named fuse.nothing" "$tmp/abl.err" || { cat "$tmp/abl.err"; exit 1; }

with_options "$nl" - > "$tmp/same.yaml"
cmp "$nl" "$tmp/same.yaml"
with_options "$nl" " - " > "$tmp/same2.yaml"
cmp "$nl" "$tmp/same2.yaml"

if [ -f "$build/lib/weft/plugins/cuda/manifest.yaml" ]; then
    export WEFT_PLUGIN_PATH="$build/lib/weft/plugins"
    "$weft" candidate freeze "$tmp/merged.yaml" -o "$tmp/merged.lock" > "$tmp/freeze.out" 2>&1 ||
        { cat "$tmp/freeze.out"; exit 1; }
    grep -q '"attn_cp": 0' "$tmp/merged.lock" || { echo "lock lacks attn_cp 0"; exit 1; }
    grep -q '"gemv_loop": 4' "$tmp/merged.lock" || { echo "lock lacks gemv_loop 4"; exit 1; }
    "$weft" candidate freeze "$tmp/plain.yaml" -o "$tmp/plain.lock" > "$tmp/freeze.out" 2>&1 ||
        { cat "$tmp/freeze.out"; exit 1; }
    "$weft" candidate freeze "$tmp/multi.yaml" -o "$tmp/multi.lock" > "$tmp/freeze.out" 2>&1 ||
        { cat "$tmp/freeze.out"; exit 1; }
    grep -q '"attn_smem_min": 120' "$tmp/multi.lock" || { echo "lock lacks attn_smem_min"; exit 1; }
    "$weft" candidate freeze "$tmp/no-two.yaml" -o "$tmp/no-two.lock" > "$tmp/freeze.out" 2>&1 ||
        { cat "$tmp/freeze.out"; exit 1; }
    grep -q '"fuse.swiglu"' "$tmp/no-two.lock" && { echo "lock still has fuse.swiglu"; exit 1; }
    grep -q '"gemv_loop": 4' "$tmp/multi.lock" || { echo "multi lock lacks gemv_loop 4"; exit 1; }
    # the failure this replaced: a key twice is refused by name
    sed 's/options: {/options: {attn_cp: 1, /' "$nl" > "$tmp/twice.yaml"
    if "$weft" candidate freeze "$tmp/twice.yaml" -o "$tmp/twice.lock" > "$tmp/twice.out" 2>&1; then
        echo "a manifest naming attn_cp twice was accepted"; exit 1
    fi
    grep -q "attn_cp: expected each key once" "$tmp/twice.out" || { cat "$tmp/twice.out"; exit 1; }
else
    echo "no cuda plugin in $build: the freeze checks are skipped"
fi
echo "with_options: ok"
