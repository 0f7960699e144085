#!/usr/bin/env bash
# weft eval run against live `weft serve` children on the CPU with stories260K (--quick):
#  - the baseline passes every gate, its speed cases adapt to the 512-token context, the quality
#    gate compares /v1/score with transformers' fp32 logits from ../shared/reference;
#  - fake.perturb-logits (every logit x1.6, greedy unchanged) fails the quality gate and only it;
#  - fake.batch-divergent (wrong only when a step holds several requests) fails
#    batched_equals_serial and keeps the serial gates (repeatable, prompt_cache);
# the same gates through --url against a running server with an API key and another served
# name (and a wrong key refused); then weft eval status, weft eval report, weft plan (ranking, a refused and an accepted plan,
# plan check, --json, the newest runs/*/*/result.json, usage errors) and weft runs on those
# results.
set -euo pipefail
build=$(cd "${1:?usage: test_eval_gates.sh BUILD_DIR}" && pwd)
weft="$build/bin/weft"
shared=${WEFT_SHARED_DIR:-$(pwd)/../shared}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

if "$weft" serve --help 2>&1 | grep -q "not in this build"; then
    echo "SKIPPED: weft serve is not in this build"
    exit 0
fi

"$weft" convert llama2c "$shared/models/stories260K/stories260K.bin" \
    "$shared/models/stories260K/tok512.bin" "$tmp/stories260k" > /dev/null
"$weft" eval probe --backend cpu --threads 1 -o "$tmp/probe.json" > /dev/null
ref="$shared/reference/stories260K/reference.safetensors"

manifest() { # name, techniques, max_concurrency
    cat > "$tmp/$1.yaml" <<YAML
format: 1
candidate: $1
model: $tmp/stories260k
backend: {name: cpu, options: {threads: 1}}
model_plugin: llama
techniques: [$2]
serving:
  max_model_len: 512
  max_concurrency: $3
  threads: 1
YAML
    WEFT_PLUGIN_PATH="$build/tests/eval-fakes" "$weft" candidate freeze "$tmp/$1.yaml" \
        -o "$tmp/$1.lock" > /dev/null
}
manifest base "" 1
manifest perturb fake.perturb-logits 1
manifest divergent fake.batch-divergent 8

run() { # name, extra args...; prints the exit status
    local name=$1
    shift
    set +e
    WEFT_PLUGIN_PATH="$build/tests/eval-fakes" "$weft" eval run --lock "$tmp/$name.lock" \
        --probe "$tmp/probe.json" --reference "$ref" --quick -o "$tmp/$name.json" "$@" \
        2> "$tmp/$name.err"
    echo $?
    set -e
}
gate() { # result, gate name -> status
    { "$weft" eval status "$1" || true; } | awk -v g="$2" '$1 == g { print $2; exit }'
}

# ---- the baseline: every gate passes -----------------------------------------------------------
rc=$(run base)
[ "$rc" = 0 ] || { cat "$tmp/base.err" "$tmp/base.json.serve.log" | tail -40; fail "baseline exit $rc"; }
"$weft" eval status "$tmp/base.json" > "$tmp/base.status" ||
    fail "status of the baseline: exit $?"
for g in batched_equals_serial sampling quality prompt_cache repeatable; do
    [ "$(gate "$tmp/base.json" $g)" = pass ] || { cat "$tmp/base.status"; fail "baseline: $g"; }
done
[ "$(gate "$tmp/base.json" retrieval)" = reference ] || fail "baseline: retrieval not recorded"
[ "$(gate "$tmp/base.json" speculative)" = skip ] || fail "baseline: speculative should skip"
grep -q "does not fit the 512-token context" "$tmp/base.status" || fail "no adaptation note"
grep -q "^p128-g32-c1 " "$tmp/base.status" || fail "no p128-g32-c1 case"
grep -q "every gate passed: the result counts" "$tmp/base.status" || fail "baseline does not count"
# the quality numbers are real: transformers' fp32 logits against the cpu fp32 path
grep -q '"exact": false' "$tmp/base.json" || fail "quality detail missing"
# the retrieval answers and greedy set are recorded for other candidates
grep -q '"prompt_hash"' "$tmp/base.json" || fail "no retrieval answers recorded"

# ---- --url: the same gates against a server already running (here weft serve behind an API key
# and another served name), the way a peer engine is evaluated ---------------------------------
"$weft" serve "$tmp/base.lock" --port 0 --api-key sekrit --served-model-name other \
    > "$tmp/url.serve.log" 2>&1 &
spid=$!
url=""
for _ in $(seq 300); do
    url=$(grep -o 'listening on http://[0-9.]*:[0-9]*' "$tmp/url.serve.log" |
        sed 's/listening on //' || true)
    if [ -n "$url" ] && curl -sf "$url/health" 2> /dev/null | grep -q '"ok"'; then break; fi
    sleep 0.1
done
set +e
"$weft" eval run --url "$url" --model "$tmp/stories260k" --api-key sekrit \
    --served-model-name other --probe "$tmp/probe.json" --reference "$ref" --quick --no-speed \
    -o "$tmp/url.json" 2> "$tmp/url.err"
url_rc=$?
"$weft" eval run --url "$url" --model "$tmp/stories260k" --api-key wrong \
    --served-model-name other --probe "$tmp/probe.json" --reference "$ref" --quick --no-speed \
    -o "$tmp/url-bad.json" 2> "$tmp/url-bad.err"
bad_rc=$?
set -e
kill "$spid" 2> /dev/null || true
wait "$spid" 2> /dev/null || true
for g in batched_equals_serial sampling quality prompt_cache repeatable; do
    [ "$(gate "$tmp/url.json" $g)" = pass ] ||
        { cat "$tmp/url.err"; "$weft" eval status "$tmp/url.json"; fail "--url: $g (exit $url_rc)"; }
done
[ "$bad_rc" = 1 ] && grep -qi "401\|api key\|unauthor" "$tmp/url-bad.err" ||
    fail "--url with a wrong key: exit $bad_rc, $(tail -n 3 "$tmp/url-bad.err")"

# ---- perturbed logits: the quality gate fails, the greedy gates do not --------------------------
rc=$(run perturb --no-speed --baseline "$tmp/base.json")
[ "$rc" = 1 ] || { tail -20 "$tmp/perturb.err"; fail "perturb-logits: exit $rc, expected 1"; }
[ "$(gate "$tmp/perturb.json" quality)" = fail ] || fail "perturb-logits passed the quality gate"
for g in batched_equals_serial repeatable prompt_cache retrieval; do
    [ "$(gate "$tmp/perturb.json" $g)" = pass ] || fail "perturb-logits: $g should pass"
done
if "$weft" eval status "$tmp/perturb.json" > "$tmp/perturb.status"; then fail "perturb counts"; fi
grep -q "a gate failed" "$tmp/perturb.status" || fail "perturb: status does not say why"

# ---- divergent when batched: batched_equals_serial fails --------------------------------------
rc=$(run divergent --no-speed --baseline "$tmp/base.json")
[ "$rc" = 1 ] || { tail -20 "$tmp/divergent.err"; fail "batch-divergent: exit $rc, expected 1"; }
[ "$(gate "$tmp/divergent.json" batched_equals_serial)" = fail ] ||
    fail "batch-divergent passed batched_equals_serial"
for g in repeatable prompt_cache quality; do
    [ "$(gate "$tmp/divergent.json" $g)" = pass ] || fail "batch-divergent: $g should pass"
done

# ---- report: one self-contained page ----------------------------------------------------------
"$weft" eval report "$tmp/base.json" "$tmp/perturb.json" -o "$tmp/report.html" 2> /dev/null
grep -q "<svg" "$tmp/report.html" || fail "report has no plots"
grep -q "Candidates side by side" "$tmp/report.html" || fail "report has no comparison"
if grep -Eo "(src|href)=['\"]?[a-z]+:" "$tmp/report.html" | grep -q .; then
    fail "report refers to external assets"
fi

# ---- plan: the ranking, a refused plan and an accepted one ------------------------------------
"$weft" plan --result "$tmp/base.json" > "$tmp/rank.txt" || fail "plan ranking: exit $?"
grep -q "^decode " "$tmp/rank.txt" && grep -q "^prefill " "$tmp/rank.txt" || fail "ranking"
cat > "$tmp/stop.yaml" <<YAML
stop: true
YAML
# Whether stopping is refused depends on this run's measurement: a gap counts only above the
# noise of the repeats, which a loaded machine widens. So the check follows the ranking: with a
# gap above noise the stop must be refused and say why; with every gap within noise it must be
# accepted (the refusal is then not exercised, and the run says so).
above=$(grep -E "^(decode|prefill) " "$tmp/rank.txt" | grep -cE "(gap above noise|leads)$" || true)
if "$weft" plan --result "$tmp/base.json" "$tmp/stop.yaml" > "$tmp/stop.txt"; then
    [ "$above" = 0 ] ||
        { cat "$tmp/rank.txt"; fail "a plan that stops far from the limits was accepted"; }
    echo "note: decode and prefill were within this run's noise; the stop refusal was not exercised"
else
    [ "$above" != 0 ] || { cat "$tmp/rank.txt" "$tmp/stop.txt"; fail "stop refused within noise"; }
    grep -q "REFUSED stop" "$tmp/stop.txt" || fail "stop refusal not explained"
fi
cat > "$tmp/plan.yaml" <<YAML
format: 1
levers:
  - name: batching
    technique: sched.continuous
    kpis: [decode, prefill]
    forecast: {low: 1.01, expected: 1.05, high: 1.08}
YAML
"$weft" plan --result "$tmp/base.json" "$tmp/plan.yaml" > "$tmp/plan.txt" || true
grep -q "^plan \(accepted\|refused\)" "$tmp/plan.txt" || fail "plan review printed nothing"
"$weft" plan check "$tmp/plan.yaml" --before "$tmp/base.json" --after "$tmp/base.json" \
    -o "$tmp/check.json" > "$tmp/check.txt"
grep -q "deferred" "$tmp/check.txt" || fail "plan check: sched.continuous should be deferred"

# ---- plan: --json, the newest runs/*/*/result.json of the working directory, usage errors ------
"$weft" plan --result "$tmp/base.json" --json > "$tmp/rank.json" || fail "plan --json: exit $?"
"${WEFT_PYTHON:-python3}" - "$tmp/rank.json" "$tmp/base.json" <<'PY' || fail "plan --json output"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["result"] == sys.argv[2], d
PY
mkdir -p "$tmp/cwd/runs/s/01" "$tmp/cwd/runs/s/02" "$tmp/empty"
cp "$tmp/base.json" "$tmp/cwd/runs/s/01/result.json"
printf '{"format": ' > "$tmp/cwd/runs/s/02/result.json"
touch -d '2 hours ago' "$tmp/cwd/runs/s/02/result.json"
(cd "$tmp/cwd" && "$weft" plan --json) > "$tmp/newest.json" || fail "plan from runs/: exit $?"
grep -q '"result": "runs/s/01/result.json"' "$tmp/newest.json" ||
    fail "plan did not take the newest result: $(cat "$tmp/newest.json")"
touch "$tmp/cwd/runs/s/02/result.json" # now the newest, and not JSON: named in the error
set +e
(cd "$tmp/cwd" && "$weft" plan) > /dev/null 2> "$tmp/newest.err"
rc=$?
set -e
[ "$rc" != 0 ] && grep -q "runs/s/02/result.json" "$tmp/newest.err" ||
    fail "plan on a broken newest result: exit $rc, $(cat "$tmp/newest.err")"
usage_err() { # expected text, directory, arguments...
    local text=$1 dir=$2 rc
    shift 2
    set +e
    (cd "$dir" && "$weft" plan "$@") > /dev/null 2> "$tmp/usage.err"
    rc=$?
    set -e
    [ "$rc" = 2 ] && grep -qF -- "$text" "$tmp/usage.err" ||
        fail "plan $* -> exit $rc (want 2), stderr: $(cat "$tmp/usage.err")"
}
usage_err "no --result and no runs/*/*/result.json here" "$tmp/empty"
usage_err "at most one plan file" "$tmp" --result "$tmp/base.json" "$tmp/plan.yaml" "$tmp/stop.yaml"
usage_err "usage: weft plan" "$tmp" --frob
usage_err "expected PLAN.yaml, --before RESULT and --after" "$tmp" check "$tmp/plan.yaml" \
    --before "$tmp/base.json"

# ---- files that are not results: exit 2 (plan: 1), the file named, where JSON breaks ----------
printf '{"format": ' > "$tmp/broken.json"
echo '{"format": "other"}' > "$tmp/other.json"
bad() { # expected exit, expected text, command...
    local want=$1 text=$2 rc
    shift 2
    set +e
    "$@" > /dev/null 2> "$tmp/bad.err"
    rc=$?
    set -e
    [ "$rc" = "$want" ] && grep -qF -- "$text" "$tmp/bad.err" ||
        fail "$* -> exit $rc (want $want), stderr: $(cat "$tmp/bad.err")"
}
bad 2 "broken.json:1:" "$weft" eval status "$tmp/broken.json"
bad 2 'other.json: expected "format": "weft-eval-result"' "$weft" eval status "$tmp/other.json"
bad 2 "missing.json" "$weft" eval report "$tmp/base.json" "$tmp/missing.json" -o "$tmp/r2.html"
bad 1 "broken.json:1:" "$weft" plan check "$tmp/plan.yaml" --before "$tmp/broken.json" \
    --after "$tmp/base.json"
bad 1 "other.json" "$weft" plan --result "$tmp/other.json"

# ---- runs -------------------------------------------------------------------------------------
"$weft" runs new search --dir "$tmp/runs" > /dev/null
"$weft" runs add search --dir "$tmp/runs" --lock "$tmp/base.lock" --result "$tmp/base.json" \
    --plan "$tmp/plan.yaml" > /dev/null
"$weft" runs add search --dir "$tmp/runs" --lock "$tmp/perturb.lock" \
    --result "$tmp/perturb.json" --check "$tmp/check.json" > /dev/null
"$weft" runs show search --dir "$tmp/runs" > "$tmp/runs.txt"
grep -q "^01-base .*(first)" "$tmp/runs.txt" || { cat "$tmp/runs.txt"; fail "runs show: base"; }
grep -q "^02-perturb .*+fake.perturb-logits.*batching x1.05.*FAIL: quality" "$tmp/runs.txt" ||
    { cat "$tmp/runs.txt"; fail "runs show: perturb"; }
echo ok
