#!/usr/bin/env bash
# The GPU machine's checks and timings, one phase per call (each fits a 10-minute device call).
# Runs from the repository root on the GPU machine with the bundle from gpu-bundle.sh in .gpu/
# and a copy of the shared references and models in .gpu/shared/ (gpu-bundle.sh --shared).
#   tools/scripts/gpu-check.sh ops       op tests, probe, parity on stories260K and the tiny
#                                        references, compute-sanitizer on a short generation
#   tools/scripts/gpu-check.sh refs      synthetic Qwen3-0.6B / Llama-3.2-1B: fp32 references
#                                        from transformers, fp32 parity (1e-3) and bf16 KL
#   tools/scripts/gpu-check.sh bench     decode benchmarks on the synthetic bf16 configs
#   tools/scripts/gpu-check.sh final     GPU unit tests, parity of the shipped candidates, decode
#                                        speed per candidate, serving throughput at 1/8/32/64
#   tools/scripts/gpu-check.sh serve     issue 7 on the GPU: paged kv op and greedy tests, the
#                                        serving candidates' throughput at 1/8/32/64 beside the
#                                        baseline on Qwen3-0.6B and Llama-3.2-1B, the prefix
#                                        cache's follow-up TTFT (2,000-token history), parity,
#                                        and the eval gates of the serving candidate
#                                        (WEFT_SERVE_CANDIDATES overrides the candidates)
#   tools/scripts/gpu-check.sh verify    every GPU unit test with the synthetic models, serving
#                                        at concurrency 32 and batch-1 decode of fast-cuda-all
#   tools/scripts/gpu-check.sh profile   a batch-1 decode step kernel by kernel: in-graph times
#                                        from the backend's option trace (and, with
#                                        WEFT_PROFILE_NCU=1, ncu's time of each kernel alone);
#                                        WEFT_PROFILE_MODELS, _CANDIDATES pick what to profile
#   tools/scripts/gpu-check.sh prefetch  exec.l2-prefetch: GPU test, GEMV from L2, decode A/B at
#                                        several budgets (WEFT_PREFETCH_BUDGETS)
#   tools/scripts/gpu-check.sh issue8    batch-1 techniques: GPU tests, decode of fast-cuda-all (or
#                                        WEFT_ISSUE8_BASE) and of it without each of WEFT_ABLATE,
#                                        in-graph traces
#   tools/scripts/gpu-check.sh mega      exec.persistent's streaming kernel: GPU test, decode
#                                        beside fast-cuda-all, node trace (WEFT_MEGA_* knobs)
#   tools/scripts/gpu-check.sh ab        kernel variants side by side: GPU tests of .gpu, then
#                                        decode of WEFT_AB_CANDIDATES with every bundle of
#                                        WEFT_AB_BUNDLES and backend options of WEFT_AB_OPTS, in
#                                        WEFT_AB_ROUNDS interleaved rounds, then traces
#                                        (Qwen3-8B's with WEFT_AB_TRACE_8B=1; only those of
#                                        WEFT_AB_TRACE_MODELS when set); at each
#                                        PROMPT:MAX_MODEL_LEN pair of WEFT_AB_LENGTHS
#   tools/scripts/gpu-check.sh tests     the GPU unit tests of WEFT_TESTS on the synthetic configs
#                                        of WEFT_TEST_CONFIGS
#   tools/scripts/gpu-check.sh prefill-tc  time to first token of long prompts with the cuda
#                                        backend's tensor-core prefill (option prefill_tc) and
#                                        without, fast-cuda-async on WEFT_PROFILE_MODELS
#   tools/scripts/gpu-check.sh prefill-quality  bf16 logits of 512-position prefills against
#                                        transformers with prefill_tc on and off (mean KL), and
#                                        compute-sanitizer on a tensor-core prefill
#   tools/scripts/gpu-check.sh sanitize  compute-sanitizer on fast-cuda-async decoding past
#                                        position 1,024 (the two-level attention merge), then
#                                        memcheck, racecheck and synccheck of each model's fastest
#                                        candidate on two layers of its real shapes
#                                        (WEFT_SANITIZE_FAST: CONFIG:CANDIDATE pairs;
#                                        WEFT_SANITIZE_TINY=0 skips the first), and PyTorch's
#                                        bf16 products of the same shapes under racecheck
#                                        (WEFT_SANITIZE_TORCH=0 skips them)
#   tools/scripts/gpu-check.sh amdahl    each model's fastest candidate with kernel classes
#                                        compiled to do no work (the backend's option ablate):
#                                        the Amdahl bound of the attention, the norms, the GEMVs
#   tools/scripts/gpu-check.sh carveout  the GEMV alone (ncu, serialised) in the driver's
#                                        shared-memory configuration and under smem_carveout 100:
#                                        duration, L1/L2 traffic, stall reasons, on
#                                        WEFT_PROFILE_MODELS (does a small L1 slow the GEMV itself?)
#   tools/scripts/gpu-check.sh prefill   long prompts: tensor-core prefill on/off, the prefix
#                                        cache's follow-up TTFT, chunked prefill's arrival KPI
# Results go to $OUT (or /tmp/weft-gpu-out): log files and a summary table printed last.
set -uo pipefail
phase=${1:-ops}
root=$(pwd)
B=$root/.gpu # the bundle every phase runs; phase ab also runs others (with_bundle)
out=${OUT:-/tmp/weft-gpu-out}
mkdir -p "$out"
export PATH=$B/bin:$PATH WEFT_PLUGIN_PATH=$B/lib/weft/plugins
export WEFT_CACHE=${WEFT_CACHE:-/tmp/weft-cache} WEFT_TEST_PLUGIN_DIR=$B/lib/weft/plugins
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-}
S=$B/shared
export WEFT_SHARED_DIR=$S
M=/tmp/weft-models
mkdir -p "$M"
summary=()
note() { summary+=("$1"); echo "== $1"; }
run() { # name, command...: runs, logs, records PASS/FAIL
  local name=$1; shift
  echo; echo "### $name: $*"
  local key
  if timeout "${WEFT_RUN_TIMEOUT:-900}" "$@" >"$out/$name.log" 2>&1; then
    key=$(grep -m1 -E 'tokens/s|aggregate|max relative|PASSED|SKIPPED' "$out/$name.log" | tr -s ' ' | cut -c1-110)
    note "PASS $name ${key}"
  else
    note "FAIL $name (rc $?) $(grep -m1 -iE 'error|fail' "$out/$name.log" | cut -c1-150)"
  fi
  tail -n 4 "$out/$name.log"
}
cuda_manifest=$root/manifests/baseline-cuda.yaml
stories=$WEFT_CACHE/models/stories260k
# stories260K converted into the model cache ($stories)
convert_stories() {
  mkdir -p "$stories"
  weft convert llama2c "$S/models/stories260K/stories260K.bin" "$S/models/stories260K/tok512.bin" \
    "$stories" >/dev/null
}
# random weights of dtype $1 (seed 1) of the named configs in $M/<cfg>-<dtype>, made in
# parallel where missing; synth_bf16: the bf16 ones
synth_as() {
  local dt=$1; shift
  for cfg in "$@"; do
    [ -d "$M/$cfg-$dt" ] || weft synth "models/configs/$cfg.json" "$M/$cfg-$dt" --dtype "$dt" \
      --seed 1 >/dev/null &
  done
  wait
}
synth_bf16() { synth_as bf16 "$@"; }
# compute-sanitizer of candidate $1 on model directory $2: prompt $3, $4 generated,
# max_model_len $5, log names tagged $6; the tools are memcheck and racecheck, or
# WEFT_SANITIZE_TOOLS (synccheck: barriers and cluster barriers; initcheck reads of unwritten
# device memory)
sanitize_on() {
  command -v compute-sanitizer >/dev/null || { note "SKIP sanitizer: no compute-sanitizer"; return; }
  local exitcode
  for tool in ${WEFT_SANITIZE_TOOLS:-memcheck racecheck}; do
    # racecheck's verdict is race_owners': cuBLASLt's own nvjet_* kernels of the prompt's
    # products report shared-memory hazards with no weft code in the process (docs/DESIGN.md)
    exitcode="--error-exitcode 9"
    [ "$tool" = racecheck ] && exitcode=
    # shellcheck disable=SC2086
    run "sanitize_${tool}_$6" compute-sanitizer --tool $tool $exitcode weft bench decode \
      --candidate "$1" --model "$2" --prompt "$3" --gen "$4" --repeats 1 --max-model-len "$5"
    note "  $tool: $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitize_${tool}_$6.log")"
    [ "$tool" = racecheck ] && race_owners "$out/sanitize_${tool}_$6.log"
  done
}
# the issue8 phase's ablations of candidate $1, written into directory $2: for each entry of
# the rest (a technique, or several joined by + that leave together because another of the
# candidate's techniques requires one of them: fuse.qkv-rope+fuse.rope-attention)
# without-<entry>.yaml, and without-all.yaml with every named technique gone once, however many
# entries name it
ablations() {
  local base=$1 dir=$2 tech t gone=" "
  shift 2
  cp "$base" "$dir/without-all.yaml"
  for tech in "$@"; do
    cp "$base" "$dir/without-$tech.yaml"
    for t in ${tech//+/ }; do
      drop_technique "$t" "$dir/without-$tech.yaml" "$dir/without-$tech.yaml" || return 1
      [[ $gone == *" $t "* ]] && continue
      drop_technique "$t" "$dir/without-all.yaml" "$dir/without-all.yaml" || return 1
      gone+="$t "
    done
  done
}
# the kernels racecheck's hazards in log $1 name, split into weft's own (weft_*) and the
# libraries' (cuBLASLt's nvjet_* and any other); a hazard in a weft kernel is a FAIL line, and
# so are hazards counted in the summary whose kernels could not be read from the report
race_owners() {
  local names ours lib count
  names=$(grep -oE 'access at [A-Za-z_][A-Za-z0-9_]*\+0x' "$1" | sed -E 's/access at //; s/\+0x$//' |
    sort | uniq -c | sort -rn || true)
  count=$(grep -m1 -oE 'RACECHECK SUMMARY: [0-9]+' "$1" | grep -oE '[0-9]+$' || true)
  if [ -z "$names" ]; then
    [ "${count:-0}" = 0 ] || note "FAIL   racecheck: $count hazards, no kernel named in $1"
    return 0
  fi
  ours=$(echo "$names" | awk '$2 ~ /^weft_/' | awk '{printf "%s %s; ", $2, $1}')
  lib=$(echo "$names" | awk '$2 !~ /^weft_/' | awk '{printf "%s %s; ", $2, $1}')
  [ -n "$ours" ] && note "FAIL   racecheck hazards in weft kernels: $ours"
  [ -n "$lib" ] && note "  racecheck hazards in library kernels (accesses a kernel): $lib"
  return 0
}
# the same on tiny-qwen3's shapes in bf16: candidate $1, prompt $2, $3 generated, max_model_len $4
sanitize_tiny() {
  [ -d "$M/tiny-qwen3-bf16" ] || weft synth "$S/reference/tiny-qwen3/config.json" \
    "$M/tiny-qwen3-bf16" --dtype bf16 --seed 1 >/dev/null
  sanitize_on "$1" "$M/tiny-qwen3-bf16" "$2" "$3" "$4" "$2"
}
# the GPU unit test $1 with the synthetic Qwen3-0.6B and Llama-3.2-1B, stories260K and Qwen3-0.6B
# for test_fuse's cuda combinations (WEFT_FUSE_MODELS overrides those), prompts of 128 tokens
gpu_test() {
  [ -x "$B/tests/$1" ] && run "$1" env WEFT_EXEC_MANIFESTS="$root/manifests" \
    WEFT_EXEC_MODELS="${WEFT_TEST_MODELS:-$M/Qwen3-0.6B-bf16:$M/Llama-3.2-1B-bf16}" \
    WEFT_FUSE_CUDA_MODELS="${WEFT_FUSE_MODELS:-stories,$M/Qwen3-0.6B-bf16}" WEFT_FUSE_PROMPT=128 \
    "$B/tests/$1"
}
# batch-1 decode as issue 8 measures it (prompt 128, 256 out, 3 repeats): log name, candidate
# manifest, config
# (WEFT_BENCH_MAX_MODEL_LEN: every such bench and trace at that max_model_len instead of the
# manifest's; the fused attention's splits, and so its merge, follow it. WEFT_BENCH_PROMPT: the
# prompt instead of 128 tokens, e.g. 1024 with max_model_len 2048 for long contexts, where the
# attention costs most: docs/perf/batch1.md, 2026-12-01)
bench_batch1() {
  run "$1" weft bench decode --candidate "$2" --model "$M/$3-bf16" \
    --prompt "${WEFT_BENCH_PROMPT:-128}" --gen 256 --repeats 3 \
    ${WEFT_BENCH_MAX_MODEL_LEN:+--max-model-len "$WEFT_BENCH_MAX_MODEL_LEN"}
}
# the backend's in-graph trace of one decode of candidate manifest $2 on config $3 (log name $1;
# the manifest's copy with trace on goes to $out/trace-src.yaml); prints the per-kernel table
trace_decode() {
  with_options "$2" "{trace: true}" > "$out/trace-src.yaml"
  run "$1" weft bench decode --candidate "$out/trace-src.yaml" --model "$M/$3-bf16" \
    --prompt "${WEFT_BENCH_PROMPT:-128}" --gen 64 --repeats 1 \
    ${WEFT_BENCH_MAX_MODEL_LEN:+--max-model-len "$WEFT_BENCH_MAX_MODEL_LEN"}
  sed -n '/cuda trace by kernel/,/^decode/p' "$out/$1.log"
  python3 "$root/tools/scripts/trace-layers.py" "$out/$1.log" || true # by position in the layer
  rm -f "$out/trace-src.yaml"
}
# manifest $1 with the backend options map $2 ('-' or empty: unchanged), on stdout; the options
# join a map the manifest already gives its backend (trace_decode's form included), which may
# span lines (a flow map continued on the next line); a manifest whose backend is neither form
# is an error (exit 1, nothing on stdout), never a silent run without the options
with_options() {
  local o
  o=$(echo "${2:--}" | sed 's/^ *//; s/ *$//')
  if [ "$o" = - ]; then cat "$1"; return; fi
  # a key the manifest's backend options already have takes the map's value (a manifest may not
  # name a key twice); the options are flat "key: scalar" pairs
  python3 - "$1" "$o" <<'PY'
import re, sys
text, o = open(sys.argv[1]).read(), sys.argv[2].strip()
pairs = [p.strip() for p in o.strip("{}").split(",") if p.strip()]
keys = {p.split(":")[0].strip() for p in pairs}
def merged(m):
    kept = [p.strip() for p in m.group(1).split(",") if p.strip()]
    kept = [p for p in kept if p.split(":")[0].strip() not in keys]
    return "backend: {name: cuda, options: {" + ", ".join(kept + pairs) + "}}"
out, n = re.subn(r"^backend: \{name: cuda, options: \{([^{}]*)\}\}[ \t]*$", merged, text,
                 flags=re.M)
if not n:
    out, n = re.subn(r"^backend: cuda$", lambda m: "backend: {name: cuda, options: {" +
                     ", ".join(pairs) + "}}", text, flags=re.M)
if n != 1:
    sys.exit(f"with_options: {sys.argv[1]}: no single 'backend: cuda' or 'backend: {{name: cuda, "
             f"options: {{...}}}}' entry to take {o}")
sys.stdout.write(out)
PY
}
# candidate manifest $2 without the technique $1 (a plain name or a {name: ..., options: {...}}
# entry of its techniques flow list, which may span lines), written to $3 ($3 may be $2). Only
# an entry named exactly $1 goes; a manifest without one, or with more than one, is an error
# (exit 1, $3 untouched), never a silent run of the unchanged candidate
drop_technique() {
  python3 - "$1" "$2" "$3" <<'PY'
import re, sys
name, src, dst = sys.argv[1:4]
text = open(src).read()
m = re.search(r"^techniques:[ \t]*\[", text, flags=re.M)
if not m:
    sys.exit(f"drop_technique: {src}: no 'techniques: [...]' flow list")
depth, i, start = 1, m.end(), m.end()
while i < len(text) and depth:
    depth += {"[": 1, "{": 1, "]": -1, "}": -1}.get(text[i], 0)
    i += 1
if depth:
    sys.exit(f"drop_technique: {src}: the techniques list is not closed")
body, entries, d, cur = text[start:i - 1], [], 0, ""
for ch in body:  # split at the commas outside any nested map or list
    d += {"[": 1, "{": 1, "]": -1, "}": -1}.get(ch, 0)
    if ch == "," and d == 0:
        entries.append(cur.strip()); cur = ""
    else:
        cur += ch
if cur.strip():
    entries.append(cur.strip())
def named(e):
    if e.startswith("{"):
        n = re.search(r"(?:^\{|,)\s*name:\s*([^,}\s]+)", e)
        return n.group(1) if n else None
    return e
hits = [e for e in entries if named(e) == name]
if len(hits) != 1:
    sys.exit(f"drop_technique: {src}: {len(hits)} entries named {name} in its techniques list")
kept = [e for e in entries if named(e) != name]
out = text[:m.start()] + "techniques: [" + ", ".join(kept) + "]" + text[i:]
open(dst, "w").write(out)
PY
}

# runs a command with the bundle in folder $1 (made by gpu-bundle.sh) first on the paths
# (a shell function too: the paths are set and restored here, not in a subshell, so run's summary
# lines stay)
with_bundle() {
  local b=$1 sp=$PATH sw=$WEFT_PLUGIN_PATH sl=$LD_LIBRARY_PATH; shift
  export PATH="$b/bin:$PATH" WEFT_PLUGIN_PATH="$b/lib/weft/plugins" LD_LIBRARY_PATH="$b/lib:$sl"
  "$@"
  export PATH=$sp WEFT_PLUGIN_PATH=$sw LD_LIBRARY_PATH=$sl
}

case $phase in
ops)
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv
  run cuda_ops "$B/tests/test_cuda_ops"
  run probe weft eval probe --backend cuda -o "$out/probe-h200.json"
  convert_stories
  run parity_stories weft eval parity --manifest "$cuda_manifest" --model "$stories" \
    --reference "$S/reference/stories260K/reference.safetensors" --max-rel 1e-3
  for m in tiny-qwen3 tiny-llama3 tiny-qwen2; do
    run "parity_$m" weft eval parity --manifest "$cuda_manifest" --model "$S/reference/$m" \
      --reference "$S/reference/$m/reference.safetensors" --max-rel 1e-3
  done
  run run_stories weft run --candidate "$cuda_manifest" --model "$stories" --temperature 0 \
    --max-tokens 64 "Once upon a time"
  run bench_stories weft bench decode --candidate "$cuda_manifest" --model "$stories" \
    --prompt 16 --gen 256
  if command -v compute-sanitizer >/dev/null; then
    run memcheck compute-sanitizer --tool memcheck --error-exitcode 9 weft run \
      --candidate "$cuda_manifest" --model "$stories" --temperature 0 --max-tokens 8 "Once"
    run racecheck compute-sanitizer --tool racecheck --error-exitcode 9 weft run \
      --candidate "$cuda_manifest" --model "$stories" --temperature 0 --max-tokens 4 "Once"
  fi
  ;;
refs)
  for cfg in Qwen3-0.6B Llama-3.2-1B; do
    weft synth "models/configs/$cfg.json" "$M/$cfg-f32" --dtype f32 --seed 1 >/dev/null &
    weft synth "models/configs/$cfg.json" "$M/$cfg-bf16" --dtype bf16 --seed 1 >/dev/null &
  done
  wait
  for cfg in Qwen3-0.6B Llama-3.2-1B; do
    run "hfref_$cfg" python3 tools/scripts/hf_reference.py "$M/$cfg-f32" "$out/ref-$cfg.safetensors" \
      --tokens 8 --prompt 8 --new 16
    run "parity_f32_$cfg" weft eval parity --manifest "$cuda_manifest" --model "$M/$cfg-f32" \
      --reference "$out/ref-$cfg.safetensors" --max-rel 1e-3
    run "parity_bf16_$cfg" weft eval parity --manifest "$cuda_manifest" --model "$M/$cfg-bf16" \
      --reference "$out/ref-$cfg.safetensors" --max-mean-kl 1e-3 --no-greedy
  done
  ;;
bench)
  synth_bf16 Llama-3.2-1B Qwen3-0.6B
  for cfg in Llama-3.2-1B Qwen3-0.6B; do
    run "bench_$cfg" weft bench decode --candidate "$cuda_manifest" --model "$M/$cfg-bf16" \
      --prompt 128 --gen 256 --repeats 5
    run "limits_$cfg" weft eval limits --model "$M/$cfg-bf16" --probe "$out/probe-h200.json" \
      --context 256
  done
  ;;
final)
  # GPU unit tests of the backend and the techniques, parity of the shipped candidates, decode
  # speed of each execution candidate, serving throughput at several concurrencies.
  for t in test_cuda_ops test_kv_paged_cuda test_exec test_fuse; do
    [ -x "$B/tests/$t" ] && run "$t" "$B/tests/$t"
  done
  convert_stories
  for c in baseline-cuda fast-cuda serve-cuda ${WEFT_GPU_EXTRA_CANDIDATES:-}; do
    run "parity_${c}_stories" weft eval parity --manifest "manifests/$c.yaml" --model "$stories" \
      --reference "$S/reference/stories260K/reference.safetensors" --max-rel 1e-3
    run "parity_${c}_tiny-qwen3" weft eval parity --manifest "manifests/$c.yaml" \
      --model "$S/reference/tiny-qwen3" --reference "$S/reference/tiny-qwen3/reference.safetensors" \
      --max-rel 1e-3
  done
  synth_bf16 Llama-3.2-1B Qwen3-0.6B
  for cfg in Llama-3.2-1B Qwen3-0.6B; do
    for c in baseline-cuda fast-cuda ${WEFT_GPU_EXTRA_CANDIDATES:-}; do
      run "bench_${c}_$cfg" weft bench decode --candidate "manifests/$c.yaml" --model "$M/$cfg-bf16" \
        --prompt 128 --gen 256 --repeats 5
    done
  done
  for n in 1 8 32 64; do
    run "serve_c${n}_Qwen3-0.6B" weft bench decode --candidate manifests/serve-cuda.yaml \
      --model "$M/Qwen3-0.6B-bf16" --prompt 128 --gen 128 --repeats 2 --concurrency "$n"
  done
  ;;
serve)
  [ -x "$B/tests/test_kv_paged_cuda" ] && run test_kv_paged_cuda "$B/tests/test_kv_paged_cuda"
  [ -x "$B/tests/test_exec" ] && run test_exec "$B/tests/test_exec"
  cands=${WEFT_SERVE_CANDIDATES:-serve-cuda serve-cuda-all}
  convert_stories
  synth_bf16 Qwen3-0.6B Llama-3.2-1B
  for c in $cands; do
    run "parity_${c}_stories" weft eval parity --manifest "manifests/$c.yaml" --model "$stories" \
      --reference "$S/reference/stories260K/reference.safetensors" --max-rel 1e-3
  done
  for cfg in Qwen3-0.6B Llama-3.2-1B; do
    # the serial baseline: its aggregate does not grow with concurrency (requests queue)
    for n in 1 8; do
      run "serve_baseline-cuda_c${n}_$cfg" weft bench decode --candidate manifests/baseline-cuda.yaml \
        --model "$M/$cfg-bf16" --prompt 128 --gen 128 --repeats 1 --concurrency "$n"
    done
    for c in $cands; do
      for n in 1 8 32 64; do
        run "serve_${c}_c${n}_$cfg" weft bench decode --candidate "manifests/$c.yaml" \
          --model "$M/$cfg-bf16" --prompt 128 --gen 128 --repeats 2 --concurrency "$n"
      done
    done
  done
  c=$(echo $cands | awk '{print $NF}')
  run "profile_${c}_c32" weft bench decode --candidate "manifests/$c.yaml" \
    --model "$M/Qwen3-0.6B-bf16" --prompt 128 --gen 128 --repeats 1 --concurrency 32 --profile
  for c in $cands; do
    weft candidate freeze "manifests/$c.yaml" -o "$out/$c.lock" >/dev/null
    run "eval_gates_$c" weft eval run --lock "$out/$c.lock" --no-speed --probe docs/perf/probe-h200.json \
      --reference "$S/reference/stories260K/reference.safetensors" -o "$out/eval-gates-$c.json"
  done
  ;;
prefill)
  # long prompts: kv.paged's tensor-core prefill, the prefix cache's follow-up TTFT, chunked
  # prefill's arrival KPI
  [ -x "$B/tests/test_kv_paged_cuda" ] && run test_kv_paged_cuda "$B/tests/test_kv_paged_cuda"
  synth_bf16 Qwen3-0.6B Llama-3.2-1B
  sed 's/  - kv.paged$/  - {name: kv.paged, options: {prefill_tensor_cores: false}}/' \
    manifests/serve-cuda-all.yaml > "$out/serve-cuda-all-notc.yaml"
  for cfg in Qwen3-0.6B Llama-3.2-1B; do
    for n in ${WEFT_PREFILL_LENGTHS:-4096}; do
      run "prefill_tc_${cfg}_$n" weft bench prefill --candidate manifests/serve-cuda-all.yaml \
        --model "$M/$cfg-bf16" --prompt "$n" --repeats 3
      run "prefill_notc_${cfg}_$n" weft bench prefill --candidate "$out/serve-cuda-all-notc.yaml" \
        --model "$M/$cfg-bf16" --prompt "$n" --repeats 3
    done
  done
  # bf16: the follow-up's 32-row products may round differently from the cold 2,032-row ones,
  # so greedy tokens of random weights may flip at near-ties (reported, not failed); f32: exact
  run prefix_ttft_Qwen3-0.6B "$B/tests/weft-prefix-bench" --backend cuda \
    --model "$M/Qwen3-0.6B-bf16" --history 2000 --new 32 --repeats 5 --tolerate-rounding
  # chunked prefill's KPI (TECHNIQUES.md row 2): p99 ITL of 8 decoding streams while an
  # 8,000-token prompt arrives, against their idle p99; whole prompts vs chunks of 256 and 64
  for sch in "sched.continuous" "{name: sched.chunked-prefill, options: {chunk_tokens: 256}}" \
             "{name: sched.chunked-prefill, options: {chunk_tokens: 64}}"; do
    tag=$(echo "$sch" | tr -cd 'a-z0-9' | sed 's/nameschedchunkedprefilloptions/chunked/')
    cat > "$out/arrival-$tag.yaml" <<EOF2
format: 1
candidate: arrival-$tag
model: stories260k
backend: cuda
model_plugin: {name: llama, options: {activation_dtype: auto, device_inputs: true}}
techniques:
  - $sch
  - kv.paged
  - exec.device-sampling
serving: {max_model_len: 8704, max_concurrency: 16}
EOF2
    run "arrival_$tag" weft bench decode --candidate "$out/arrival-$tag.yaml" \
      --model "$M/Qwen3-0.6B-bf16" --concurrency 8 --prompt 16 --gen 1100 --arrival 8000 --repeats 5
  done
  ;;
profile)
  # where a batch-1 decode step's time goes, kernel by kernel, two ways:
  #  - trace: the backend's option trace stamps the global timer in every kernel as it passes its
  #    wait for the previous one; the last replayed graph's gaps are each kernel's in-graph time
  #    on the critical path (cuda_trace.c);
  #  - ncu: every kernel timed alone (clocks and caches left as they are), summed over one step by
  #    tools/scripts/ncu-kernels.py; alone, a kernel loses its neighbours' PDL overlap.
  models=${WEFT_PROFILE_MODELS:-Qwen3-0.6B Llama-3.2-1B}
  synth_bf16 $models
  for cfg in $models; do
    for cand in ${WEFT_PROFILE_CANDIDATES:-fast-cuda-all}; do
      trace_decode "trace_${cand}_$cfg" "manifests/$cand.yaml" "$cfg"
      if [ "${WEFT_PROFILE_NCU:-0}" = 1 ]; then
        run "ncu_${cand}_$cfg" timeout 250 ncu --clock-control none --cache-control none \
          --metrics gpu__time_duration.sum --csv -c 1500 --log-file "$out/ncu_${cand}_$cfg.csv" \
          weft bench decode --candidate "manifests/$cand.yaml" --model "$M/$cfg-bf16" \
          --prompt 128 --gen 8 --repeats 1
        python3 tools/scripts/ncu-kernels.py "$out/ncu_${cand}_$cfg.csv" | tee "$out/kernels_${cand}_$cfg.txt"
      fi
    done
  done
  ;;
prefetch)
  # exec.l2-prefetch: its GPU test, the GEMV microbenchmark's L2-hot column, and batch-1 decode of
  # fast-cuda-all against fast-cuda-prefetch at several budgets, one model at a time
  models=${WEFT_PROFILE_MODELS:-Qwen3-0.6B Llama-3.2-1B Qwen3-8B}
  synth_bf16 $models
  mkdir -p "$out/cand"
  for v in ${WEFT_PREFETCH_BUDGETS:-8 24 40}; do # "b<MiB>": bulk prefetches
    mb=${v#b}; bulk=false; [ "$v" != "$mb" ] && bulk=true
    sed "s/exec.l2-prefetch\]/{name: exec.l2-prefetch, options: {budget_mb: $mb, bulk: $bulk}}]/" \
      manifests/fast-cuda-prefetch.yaml > "$out/cand/prefetch-$v.yaml"
  done
  gpu_test test_l2_prefetch
  run gemv_bench "$B/tests/cuda_gemv_bench" 4251 ${WEFT_GEMV_SHAPES:-all} 1
  for cfg in $models; do
    for c in manifests/fast-cuda-all.yaml "$out"/cand/prefetch-*.yaml; do
      bench_batch1 "bench_$(basename "$c" .yaml)_$cfg" "$c" "$cfg"
    done
  done
  rm -rf "$out/cand"
  ;;
issue8)
  # issue 8's figures in one call: the GPU tests of the batch-1 techniques, then batch-1 decode
  # (prompt 128, 256 out, 3 repeats) of fast-cuda-all (or the manifest WEFT_ISSUE8_BASE names)
  # and of it without each of the techniques named in WEFT_ABLATE (each alone removed, then all
  # of them), on every model of WEFT_PROFILE_MODELS, and its in-graph trace on the small models
  models=${WEFT_PROFILE_MODELS:-Qwen3-0.6B Llama-3.2-1B Qwen3-8B}
  synth_bf16 $models
  for t in ${WEFT_ISSUE8_TESTS:-test_cuda_ops test_fuse test_exec test_persistent test_async_gpu \
      test_l2_prefetch test_kv_paged_cuda}; do
    gpu_test "$t"
  done
  mkdir -p "$out/cand"
  base=${WEFT_ISSUE8_BASE:-manifests/fast-cuda-all.yaml} # the candidate the removals start from
  cands=("$base")
  # shellcheck disable=SC2086
  ablations "$base" "$out/cand" ${WEFT_ABLATE:-} || exit 1
  for tech in ${WEFT_ABLATE:-}; do cands+=("$out/cand/without-$tech.yaml"); done
  set -- ${WEFT_ABLATE:-}
  [ $# -gt 1 ] && cands+=("$out/cand/without-all.yaml")
  for cfg in $models; do
    for c in "${cands[@]}" ${WEFT_ISSUE8_EXTRA:-}; do
      bench_batch1 "bench_$(basename "$c" .yaml)_$cfg" "$c" "$cfg"
    done
  done
  for cfg in $models; do # WEFT_ISSUE8_TRACE=0 skips the traces
    [ "$cfg" = Qwen3-8B ] || [ "${WEFT_ISSUE8_TRACE:-1}" = 0 ] ||
      trace_decode "trace_$cfg" "$base" "$cfg"
  done
  cp "$out"/cand/*.yaml "$out/" 2>/dev/null; rm -rf "$out/cand"
  ;;
mega)
  # exec.persistent's streaming kernel (weft_megakernel): its GPU test (greedy tokens equal to
  # baseline-cuda's), then batch-1 decode of fast-cuda-all and fast-cuda-persistent (plus
  # WEFT_MEGA_EXTRA manifests) on WEFT_PROFILE_MODELS, and the kernel's node trace (time per op
  # on the step's critical path) on each model
  models=${WEFT_PROFILE_MODELS:-Qwen3-0.6B Llama-3.2-1B Qwen3-8B}
  synth_bf16 $models
  for t in ${WEFT_MEGA_TESTS:-test_persistent}; do gpu_test "$t"; done
  sed 's/exec\.persistent,/{name: exec.persistent, options: {trace: true}},/' \
    manifests/fast-cuda-persistent.yaml > "$out/mega-trace.yaml"
  for cfg in $models; do
    for c in ${WEFT_MEGA_CANDIDATES:-manifests/fast-cuda-all.yaml manifests/fast-cuda-persistent.yaml} \
        ${WEFT_MEGA_EXTRA:-}; do
      bench_batch1 "bench_$(basename "$c" .yaml)_$cfg" "$c" "$cfg"
    done
    run "mtrace_$cfg" env WEFT_LOG=info weft bench decode --candidate "$out/mega-trace.yaml" --model "$M/$cfg-bf16" \
      --prompt 128 --gen 64 --repeats 1
    grep -E "exec.persistent\] (trace|step of)" "$out/mtrace_$cfg.log" | cut -c1-160
  done
  # WEFT_MEGA_NCU=1: ncu's warp stall reasons and source hot spots of one launch of the kernel
  if [ "${WEFT_MEGA_NCU:-0}" = 1 ]; then
    cfg=${models%% *}
    run "ncu_mega_$cfg" ncu --clock-control none --kernel-name weft_megakernel --launch-skip 8 \
      --launch-count 1 --section WarpStateStats --section SourceCounters \
      --section MemoryWorkloadAnalysis --section SpeedOfLight \
      weft bench decode --candidate manifests/fast-cuda-persistent.yaml --model "$M/$cfg-bf16" \
      --prompt 128 --gen 16 --repeats 1
    sed -n '/weft_megakernel/,$p' "$out/ncu_mega_$cfg.log" | cut -c1-150 | head -150
  fi
  ;;
ab)
  # WEFT_AB_BUNDLES: bundle folders relative to the root (default .gpu); WEFT_AB_OPTS: backend
  # option maps, ';'-separated, '-' for none (default '-'); WEFT_AB_CANDIDATES: manifests
  # (default fast-cuda-async); WEFT_AB_TESTS: GPU tests run first with .gpu. Every (bundle,
  # options, candidate, model) is benched once per round, rounds interleaved so drift between
  # runs shows; the summary names each run bench_<round>_<bundle>_<opts#>_<candidate>_<model>.
  models=${WEFT_PROFILE_MODELS:-Qwen3-0.6B Llama-3.2-1B Qwen3-8B}
  synth_bf16 $models
  for t in ${WEFT_AB_TESTS:-}; do gpu_test "$t"; done
  mkdir -p "$out/cand"
  IFS=';' read -r -a abopts <<< "${WEFT_AB_OPTS:--}"
  # WEFT_AB_LENGTHS: "P:M ..." pairs (e.g. "128:4096 2560:4096"), each run as if given as
  # WEFT_BENCH_PROMPT=P WEFT_BENCH_MAX_MODEL_LEN=M, its runs named _pP_mM; unset: one pass
  # with those variables as they are
  for pm in ${WEFT_AB_LENGTHS:--}; do
    lt=
    if [ "$pm" != - ]; then
      export WEFT_BENCH_PROMPT=${pm%%:*} WEFT_BENCH_MAX_MODEL_LEN=${pm##*:}
      lt=_p${pm%%:*}_m${pm##*:}
    fi
    for ((r = 1; r <= ${WEFT_AB_ROUNDS:-2}; r++)); do
      for cfg in $models; do
        for bdl in ${WEFT_AB_BUNDLES:-.gpu}; do
          for i in "${!abopts[@]}"; do
            for c in ${WEFT_AB_CANDIDATES:-manifests/fast-cuda-async.yaml}; do
              m=$out/cand/$(basename "$c" .yaml)-o$i.yaml
              with_options "$c" "${abopts[$i]}" > "$m"
              with_bundle "$root/$bdl" bench_batch1 \
                "bench_${r}_${bdl#.}_o${i}_$(basename "$c" .yaml)_$cfg$lt" "$m" "$cfg"
            done
          done
        done
      done
    done
    # the in-graph trace of the first candidate with .gpu and each options map (WEFT_ISSUE8_TRACE=0
    # skips them; Qwen3-8B's only with WEFT_AB_TRACE_8B=1; WEFT_AB_TRACE_MODELS: only these)
    c=$(echo ${WEFT_AB_CANDIDATES:-manifests/fast-cuda-async.yaml} | cut -d' ' -f1)
    for cfg in ${WEFT_AB_TRACE_MODELS:-$models}; do
      [ "${WEFT_ISSUE8_TRACE:-1}" = 0 ] && continue
      [ "$cfg" = Qwen3-8B ] && [ "${WEFT_AB_TRACE_8B:-0}" != 1 ] && continue
      for i in "${!abopts[@]}"; do
        with_options "$c" "${abopts[$i]}" > "$out/cand/trace-o$i.yaml"
        trace_decode "trace_o${i}_$cfg$lt" "$out/cand/trace-o$i.yaml" "$cfg"
      done
    done
  done # WEFT_AB_LENGTHS
  for i in "${!abopts[@]}"; do echo "options o$i: ${abopts[$i]}"; done
  rm -rf "$out/cand"
  ;;
prefill-tc)
  # the cuda backend's tensor-core prefill on the contiguous cache (option prefill_tc, default
  # on): prefill (submit to first token) of WEFT_PREFILL_LENGTHS-token prompts by
  # fast-cuda-async with and without it, and the decode that follows (32 tokens, unchanged
  # kernels); GPU tests of WEFT_AB_TESTS first
  models=${WEFT_PROFILE_MODELS:-Qwen3-0.6B Llama-3.2-1B Qwen3-8B}
  synth_bf16 $models
  for t in ${WEFT_AB_TESTS:-}; do gpu_test "$t"; done
  with_options manifests/fast-cuda-async.yaml "{prefill_tc: false}" > "$out/fast-cuda-async-notc.yaml"
  for cfg in $models; do
    for n in ${WEFT_PREFILL_LENGTHS:-1024 2560}; do
      mml=512
      while [ "$mml" -lt $((n + 32)) ]; do mml=$((mml * 2)); done
      for c in manifests/fast-cuda-async.yaml "$out/fast-cuda-async-notc.yaml"; do
        tag=$(basename "$c" .yaml)
        run "ttft_${tag}_${cfg}_$n" weft bench decode --candidate "$c" --model "$M/$cfg-bf16" \
          --prompt "$n" --gen 32 --repeats 3 --max-model-len "$mml"
        note "  $tag $cfg $n: $(grep -m1 'prefill' "$out/ttft_${tag}_${cfg}_$n.log" | tr -s ' ')"
      done
    done
  done
  ;;
prefill-quality)
  # what the tensor-core prefill's rounding of the softmax weights costs: bf16 logits of
  # 512-position passes (every row one prefill step) against transformers' fp32 logits of the
  # same weights, mean KL with prefill_tc on and off; then compute-sanitizer memcheck and
  # racecheck on a bf16 prefill of tiny-qwen3's shapes
  synth_as bf16 Qwen3-0.6B Llama-3.2-1B
  synth_as f32 Qwen3-0.6B Llama-3.2-1B
  with_options "$cuda_manifest" "{prefill_tc: false}" > "$out/baseline-cuda-notc.yaml"
  for cfg in Qwen3-0.6B Llama-3.2-1B; do
    run "hfref512_$cfg" python3 tools/scripts/hf_reference.py "$M/$cfg-f32" \
      "$M/ref512-$cfg.safetensors" --tokens 512 --prompt 8 --new 16
    for c in "$cuda_manifest" "$out/baseline-cuda-notc.yaml"; do
      tag=$(basename "$c" .yaml)
      run "kl512_${tag}_$cfg" weft eval parity --manifest "$c" --model "$M/$cfg-bf16" \
        --reference "$M/ref512-$cfg.safetensors" --max-mean-kl 1e-3 --no-greedy
      note "  $tag $cfg: $(grep -m1 -i 'kl' "$out/kl512_${tag}_$cfg.log" | tr -s ' ' | cut -c1-150)"
    done
  done
  sanitize_tiny "$cuda_manifest" 200 2 256
  ;;
sanitize)
  # compute-sanitizer memcheck and racecheck on fast-cuda-async decoding past position 1,024
  # of a 2,048-position cache (tiny-qwen3's shapes, bf16): the fused attention's clusters each
  # merge a group of splits and the last merges the groups (docs/DESIGN.md, the merge order).
  # Then each model's fastest batch-1 candidate (their folds' flags, the attention's early exits,
  # split query heads, L2 loads) on two layers of the real shapes, with synccheck too.
  [ "${WEFT_SANITIZE_TINY:-1}" = 0 ] || sanitize_tiny manifests/fast-cuda-async.yaml 1100 8 2048
  # the library alone: PyTorch's bf16 products on the same prefill shapes under racecheck (no
  # weft code), to compare with the nvjet_* hazards race_owners lists for weft's prefill
  if [ "${WEFT_SANITIZE_TORCH:-1}" != 0 ] && python3 -c "import torch" 2>/dev/null; then
    run sanitize_racecheck_torch compute-sanitizer --tool racecheck \
      python3 tools/scripts/lt_racecheck.py --tokens 128
    note "  racecheck: $(grep -m1 'RACECHECK SUMMARY' "$out/sanitize_racecheck_torch.log")"
    race_owners "$out/sanitize_racecheck_torch.log"
  fi
  for pair in ${WEFT_SANITIZE_FAST:-Qwen3-0.6B:fast-cuda-async-smem-loop-nl-ex \
      Llama-3.2-1B:fast-cuda-async-loop-nl-b128 Qwen3-8B:fast-cuda-async-loop-nl-qs-l2-b128}; do
    cfg=${pair%%:*} cand=${pair#*:}
    [ -d "$M/$cfg-bf16-2l" ] || weft synth "models/configs/$cfg.json" "$M/$cfg-bf16-2l" \
      --dtype bf16 --seed 1 --layers 2 >/dev/null
    WEFT_SANITIZE_TOOLS=${WEFT_SANITIZE_TOOLS:-memcheck racecheck synccheck} \
      sanitize_on "manifests/$cand.yaml" "$M/$cfg-bf16-2l" 128 8 512 "${cand}_$cfg"
  done
  ;;
carveout)
  # batch1.md's open question: with smem_carveout 100 the products of Llama-3.2-1B and Qwen3-8B
  # ran slower in the replayed graph. ncu runs each kernel alone, so the GEMV's own speed in each
  # configuration shows apart from what co-resident blocks do to it. Four launches of the kernels
  # WEFT_CARVEOUT_KERNELS matches (an ncu regex; default weft_gemv_1 and weft_gemv_swiglu_1, the
  # plain products) from a decode step of WEFT_CARVEOUT_BASE (default fast-cuda-async), as it is
  # and with the backend options WEFT_CARVEOUT_OPTS (default {smem_carveout: 100}).
  models=${WEFT_PROFILE_MODELS:-Llama-3.2-1B}
  synth_bf16 $models
  mkdir -p "$out/cand"
  cbase=${WEFT_CARVEOUT_BASE:-manifests/fast-cuda-async.yaml}
  with_options "$cbase" "${WEFT_CARVEOUT_OPTS:-{smem_carveout: 100\}}" > "$out/cand/smem.yaml" ||
    exit 1
  for cfg in $models; do
    for c in "$cbase" "$out/cand/smem.yaml"; do
      tag=$(basename "$c" .yaml)
      run "ncu_carveout_${tag}_$cfg" ncu --clock-control none --launch-skip 400 --launch-count 4 \
        -k regex:"${WEFT_CARVEOUT_KERNELS:-weft_gemv_(swiglu_)?1\$}" --section LaunchStats --section SpeedOfLight \
        --section MemoryWorkloadAnalysis --section WarpStateStats \
        weft bench decode --candidate "$c" --model "$M/$cfg-bf16" --prompt 16 --gen 32 --repeats 1
      grep -E "^  weft_|Duration|Shared Memory Configuration|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|DRAM Throughput|Stall Long|Warp Cycles Per Issued" \
        "$out/ncu_carveout_${tag}_$cfg.log" | cut -c1-110
    done
  done
  rm -rf "$out/cand"
  ;;
amdahl)
  # the backend's option ablate (profiling only): each model's fastest candidate as shipped and
  # with the fused attention (1), the fused add + RMSNorm (2), both (3), the GEMVs (4) and all
  # three (7) compiled to do no work, so each figure is the step as if that class cost only its
  # kernel boundary (docs/perf/batch1.md). WEFT_AMDAHL_RUNS: "config:candidate ..." pairs.
  runs=${WEFT_AMDAHL_RUNS:-Qwen3-0.6B:fast-cuda-async-smem-loop Llama-3.2-1B:fast-cuda-async-loop Qwen3-8B:fast-cuda-async-loop}
  synth_bf16 $(for r in $runs; do echo "${r%%:*}"; done)
  mkdir -p "$out/cand"
  for r in $runs; do
    cfg=${r%%:*} cand=${r#*:}
    for a in ${WEFT_AMDAHL_MASKS:-0 1 2 3 4 7}; do
      if [ "$a" = 0 ]; then cp "manifests/$cand.yaml" "$out/cand/a.yaml"
      else with_options "manifests/$cand.yaml" "{ablate: $a}" > "$out/cand/a.yaml"; fi
      bench_batch1 "amdahl_${cfg}_${cand}_ablate$a" "$out/cand/a.yaml" "$cfg"
    done
  done
  rm -rf "$out/cand"
  ;;
verify)
  # every GPU unit test with the synthetic models, then the headline figures of both issues
  synth_bf16 Qwen3-0.6B Llama-3.2-1B
  for t in test_cuda_ops test_kv_paged_cuda test_persistent; do gpu_test $t; done
  run serve_c32_Qwen3-0.6B weft bench decode --candidate manifests/serve-cuda-all.yaml \
    --model "$M/Qwen3-0.6B-bf16" --prompt 128 --gen 128 --repeats 3 --concurrency 32
  for cfg in Qwen3-0.6B Llama-3.2-1B; do
    bench_batch1 "bench_fast-cuda-all_$cfg" manifests/fast-cuda-all.yaml "$cfg"
  done
  for t in test_exec test_async_gpu test_fuse; do gpu_test $t; done
  ;;
tests)
  # the GPU unit tests named in WEFT_TESTS (gpu_test's models, or the synthetic configs named in
  # WEFT_TEST_CONFIGS, e.g. Qwen3-8B, made when missing); test_cuda_ops runs only the tests whose
  # names match WEFT_TEST_FILTER when it is set (a cmocka pattern, e.g. '*norm_linear*')
  cfgs=${WEFT_TEST_CONFIGS:-Qwen3-0.6B Llama-3.2-1B}
  # shellcheck disable=SC2086
  synth_bf16 $cfgs
  WEFT_TEST_MODELS=$(for c in $cfgs; do printf '%s:' "$M/$c-bf16"; done)
  export WEFT_TEST_MODELS=${WEFT_TEST_MODELS%:}
  for t in ${WEFT_TESTS:-test_cuda_ops}; do gpu_test "$t"; done
  ;;
*)
  echo "unknown phase $phase" >&2
  exit 2
  ;;
esac
echo
echo "summary ($phase):"
printf '  %s\n' "${summary[@]}"
printf '%s\n' "${summary[@]}" > "$out/summary.txt"
# the device tool returns only a few files: WEFT_GPU_TAR=1 packs every log into one archive
if [ "${WEFT_GPU_TAR:-0}" = 1 ]; then
  tar czf "/tmp/gpu-check-$phase.tgz" -C "$out" . && find "$out" -type f ! -name summary.txt -delete &&
    mv "/tmp/gpu-check-$phase.tgz" "$out/"
fi
