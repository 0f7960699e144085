#!/usr/bin/env bash
# tools/scripts/gpu-queue.sh, which runs a device call's steps in turn within a time budget:
# a queue with a bad line runs nothing and names the line; steps that pass, fail, overrun their
# box or do not fit the budget are each reported in summary.txt; $OUT ends with exactly
# summary.txt and logs.tgz, the archive holding every step's log and folder; a signal in the
# middle of a step still leaves the finished steps' results. No GPU is needed: the steps are
# plain shell lines.
set -euo pipefail
tmp=$(mktemp -d)
qpid=""
cleanup() { # a failed check must not leave the queue of part 4 running
    if [ -n "$qpid" ]; then kill -TERM "$qpid" 2>/dev/null || true; fi
    pkill -f "^sleep 44.7" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
q=tools/scripts/gpu-queue.sh
export WEFT_QUEUE_WORK=$tmp/work
fail() { echo "FAIL: $*"; [ -f "$tmp/out/summary.txt" ] && cat "$tmp/out/summary.txt"; exit 1; }

# 1. a bad line (no seconds), a repeated name and a box out of range: nothing runs, exit 2
cat > "$tmp/bad.queue" <<EOF
# comment, then a blank line

first 5 touch $tmp/ran
second five echo no
first 5 echo again
third 0 echo zero
EOF
set +e
OUT=$tmp/out bash $q "$tmp/bad.queue" 2> "$tmp/bad.err"
rc=$?
set -e
[ "$rc" = 2 ] || fail "bad queue: exit $rc, expected 2"
[ ! -e "$tmp/ran" ] || fail "bad queue: a step ran"
grep -q "bad.queue:4: expected 'NAME SECONDS COMMAND'" "$tmp/bad.err" || fail "line 4 not named"
grep -q "bad.queue:5: step 'first' already named at line 3" "$tmp/bad.err" ||
    fail "repeated name not named"
grep -q "bad.queue:6: step 'third': SECONDS must be 1-3600, not 0" "$tmp/bad.err" ||
    fail "box 0 not refused"
set +e
bash $q --check "$tmp/bad.queue" > /dev/null 2>&1
rc=$?
set -e
[ "$rc" = 2 ] || fail "--check of the bad queue: exit $rc, expected 2"
echo "ok: bad queue refused before any step"

# every queue committed under tools/queues/ is well formed
for f in tools/queues/*.queue; do
    bash $q --check "$f" > "$tmp/check.out" || fail "$f: $(cat "$tmp/check.out")"
done
echo "ok: the committed queues check"

# 2. pass (with its own summary.txt), fail, overrun, skipped for the budget
cat > "$tmp/run.queue" <<'EOF'
pass 20 mkdir -p "$OUT" && echo "PASS x 1.5 tokens/s" > "$OUT/summary.txt" && echo log-a > "$OUT/a.log" && echo "== printed"
flagged 20 mkdir -p "$OUT" && printf 'PASS y\nFAIL z (rc 1)\n' > "$OUT/summary.txt"
fail 20 echo "== FAIL b-check (rc 3)"; echo "last words"; exit 3
slow 1 echo "== started"; sleep 30
big 200 echo "never"
EOF
set +e
OUT=$tmp/out WEFT_QUEUE_BUDGET=100 bash $q "$tmp/run.queue" > "$tmp/run.out" 2>&1
rc=$?
set -e
[ "$rc" = 1 ] || fail "queue with failures: exit $rc, expected 1"
s=$tmp/out/summary.txt
grep -q "^queue run.queue: 5 step(s), budget 100 s" "$s" || fail "header"
grep -q "^## pass rc=0 [0-9]*s ok$" "$s" || fail "pass step line"
grep -q "^  PASS x 1.5 tokens/s$" "$s" || fail "the step's own summary.txt"
! grep -q "== printed" "$s" || fail "printed lines shown though the step has a summary.txt"
grep -q "^## flagged rc=0 [0-9]*s ran, 1 FAIL line(s)$" "$s" || fail "step with a FAIL line"
grep -q "^  FAIL z (rc 1)$" "$s" || fail "the flagged step's summary"
grep -q "^## fail rc=3 [0-9]*s failed$" "$s" || fail "fail step line"
grep -q "^  == FAIL b-check (rc 3)$" "$s" || fail "the failed step's printed lines"
grep -q "^  | last words$" "$s" || fail "the failed step's last lines"
grep -q "^## slow rc=124 [0-9]*s timed out after 1 s$" "$s" || fail "overrun step"
grep -q "^## big skipped: its box is 200 s, [0-9]* s of the budget left$" "$s" ||
    fail "step beyond the budget"
grep -q "^queue done: 4 run, 3 not ok, 1 skipped" "$s" || fail "closing line"
[ "$(ls "$tmp/out" | sort | tr '\n' ' ')" = "logs.tgz summary.txt " ] ||
    fail "OUT holds $(ls "$tmp/out")"
tar tzf "$tmp/out/logs.tgz" > "$tmp/list"
for f in ./pass.log ./pass/summary.txt ./pass/a.log ./fail.log ./slow.log ./queue-summary.txt; do
    grep -qx "$f" "$tmp/list" || fail "logs.tgz lacks $f"
done
! grep -q "big" "$tmp/list" || fail "a skipped step left files"
echo "ok: pass, fail, overrun and skip reported; OUT holds two files"

# 3. every step passes: exit 0
printf 'one 10 true\ntwo 10 echo "== PASS two"\n' > "$tmp/ok.queue"
OUT=$tmp/out bash $q "$tmp/ok.queue" > /dev/null || fail "all-pass queue exited $?"
grep -q "^queue done: 2 run, 0 not ok, 0 skipped" "$tmp/out/summary.txt" || fail "all-pass line"
echo "ok: all-pass queue exits 0"

# 4. a signal during a step: the finished step is there, the interruption is said, the step's
# process group ends
printf 'done 10 echo "== PASS done"\nhang 60 sleep 44.7\n' > "$tmp/sig.queue"
OUT=$tmp/out bash $q "$tmp/sig.queue" > /dev/null 2>&1 &
qpid=$!
for _ in $(seq 300); do
    grep -q "^## done" "$tmp/out/summary.txt" 2>/dev/null && break
    sleep 0.1
done
# published when the step ended, before any signal (a call cut off by SIGKILL keeps it)
grep -q "^  == PASS done$" "$tmp/out/summary.txt" || fail "finished step not published at once"
tar tzf "$tmp/out/logs.tgz" > "$tmp/list"
grep -qx ./done.log "$tmp/list" || fail "finished step's log not packed at once: $(cat "$tmp/list")"
for _ in $(seq 300); do # the second step running
    pgrep -f "^sleep 44.7" > /dev/null && break
    sleep 0.1
done
pgrep -f "^sleep 44.7" > /dev/null || fail "the second step did not start"
kill -TERM "$qpid"
set +e
wait "$qpid"
rc=$?
set -e
[ "$rc" = 1 ] || fail "interrupted queue: exit $rc, expected 1"
grep -q "^  == PASS done$" "$tmp/out/summary.txt" || fail "finished step lost on a signal"
grep -q "^interrupted (signal) during hang" "$tmp/out/summary.txt" || fail "interruption not said"
for _ in $(seq 50); do
    pgrep -f "^sleep 44.7" > /dev/null || break
    sleep 0.1
done
! pgrep -f "^sleep 44.7" > /dev/null || fail "the interrupted step's sleep still runs"
echo "ok: a signal keeps the finished steps and ends the running one"
echo "test_gpu_queue: all passed"
