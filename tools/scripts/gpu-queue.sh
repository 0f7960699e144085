#!/usr/bin/env bash
# Runs a queue of GPU steps in one device call, within a time budget, so that what finished
# comes back even when a later step fails, overruns or the call is cut off.
#
#   tools/scripts/gpu-queue.sh QUEUE_FILE
#   tools/scripts/gpu-queue.sh --check QUEUE_FILE...   checks the files and lists their steps
#
# The queue file holds one step a line: NAME SECONDS COMMAND. NAME is letters, digits, '.', '_'
# or '-'; SECONDS is the step's time box (1-3600); COMMAND is a shell line run with bash from the
# repository root, with OUT set to a folder of its own (gpu-check.sh writes its logs and
# summary.txt there). Blank lines and lines starting with '#' are skipped. Every line is checked
# before any step runs; a bad one stops the queue with its file and line named (exit 2).
#
# The device returns only a few files from $OUT, so $OUT ends up holding two: summary.txt (for
# each step its name, exit status and seconds, then its own summary.txt or, without one, the
# '== ' lines it printed) and logs.tgz (every step's folder and log). Both are rewritten after
# each step, so a call that is cut off still returns the steps before it.
#
# Environment: OUT (default /tmp/weft-gpu-out); WEFT_QUEUE_BUDGET, the seconds the whole queue
# may take (default 560: a 600-second device call with room to pack and return); a step whose
# box does not fit in what is left of the budget is skipped and said so. WEFT_QUEUE_WORK, the
# folder the steps' files are gathered in (default /tmp/weft-queue-work, emptied first).
# Exit status: 0 when every step ran, exited 0 and has no FAIL line in its summary.txt (the
# form gpu-check.sh gives a failed check), 1 otherwise, 2 for a bad queue or usage.
set -uo pipefail
usage() { echo "usage: gpu-queue.sh QUEUE_FILE | --check QUEUE_FILE..." >&2; exit 2; }
check_only=0
if [ "${1:-}" = --check ]; then
  check_only=1
  shift
  [ $# -ge 1 ] || usage
  if [ $# -gt 1 ]; then # each file on its own
    rc=0
    for f in "$@"; do bash "$0" --check "$f" || rc=2; done
    exit $rc
  fi
fi
[ $# -eq 1 ] || usage
queue=$1
if [ ! -r "$queue" ] || [ -d "$queue" ]; then
  echo "gpu-queue: cannot read queue file '$queue'" >&2
  exit 2
fi
budget=${WEFT_QUEUE_BUDGET:-560}
if ! [[ $budget =~ ^[0-9]+$ ]] || [ "$budget" -lt 1 ]; then
  echo "gpu-queue: WEFT_QUEUE_BUDGET must be a positive number of seconds, not '$budget'" >&2
  exit 2
fi
out=${OUT:-/tmp/weft-gpu-out}
work=${WEFT_QUEUE_WORK:-/tmp/weft-queue-work}

# Check every line first: nothing runs from a queue with a mistake in it.
names=() boxes=() cmds=() lineno=0 bad=0
declare -A seen=()
while IFS= read -r line || [ -n "$line" ]; do
  lineno=$((lineno + 1))
  [[ $line =~ ^[[:space:]]*(#|$) ]] && continue
  if ! [[ $line =~ ^[[:space:]]*([A-Za-z0-9._-]+)[[:space:]]+([0-9]+)[[:space:]]+(.*[^[:space:]])[[:space:]]*$ ]]; then
    echo "$queue:$lineno: expected 'NAME SECONDS COMMAND', got: $line" >&2
    bad=1
    continue
  fi
  name=${BASH_REMATCH[1]} box=${BASH_REMATCH[2]} cmd=${BASH_REMATCH[3]}
  if [ "${#box}" -gt 4 ] || [ "$box" -lt 1 ] || [ "$box" -gt 3600 ]; then
    echo "$queue:$lineno: step '$name': SECONDS must be 1-3600, not $box" >&2
    bad=1
    continue
  fi
  if [ -n "${seen[$name]:-}" ]; then
    echo "$queue:$lineno: step '$name' already named at line ${seen[$name]}" >&2
    bad=1
    continue
  fi
  seen[$name]=$lineno
  names+=("$name") boxes+=("$box") cmds+=("$cmd")
done < "$queue"
[ "$bad" = 0 ] || exit 2
if [ "${#names[@]}" = 0 ]; then
  echo "gpu-queue: $queue names no step" >&2
  exit 2
fi
if [ "$check_only" = 1 ]; then
  total=0
  for i in "${!names[@]}"; do
    printf '%s: %s %s s\n' "$queue" "${names[$i]}" "${boxes[$i]}"
    total=$((total + boxes[i]))
  done
  echo "$queue: ${#names[@]} step(s), boxes ${total} s in all, budget ${budget} s"
  exit 0
fi

rm -rf "$work" && mkdir -p "$work" "$out" || exit 2
rm -f "$out/summary.txt" "$out/logs.tgz"
sum=$work/queue-summary.txt
{
  echo "queue $(basename "$queue"): ${#names[@]} step(s), budget ${budget} s, started $(date -u +%FT%TZ)"
  git rev-parse --short HEAD 2>/dev/null | sed 's/^/commit /'
} > "$sum"
# logs.tgz, then summary.txt in $OUT, each replaced whole (written beside, then moved): a
# summary naming a step means the archive already holds its logs
publish() {
  # tar's status 1 (a file changed while read: a running step's log) still leaves an archive
  tar czf "$out/logs.tgz.part" -C "$work" . 2>/dev/null
  [ $? -gt 1 ] || mv -f "$out/logs.tgz.part" "$out/logs.tgz"
  cp "$sum" "$out/summary.txt.part" && mv -f "$out/summary.txt.part" "$out/summary.txt"
}
publish # the header alone: the queue started
current="" pid=""
on_signal() {
  # the running step (timeout leads its own process group); jobs -p also finds a step whose
  # pid was not yet taken when the signal came
  local j
  for j in $pid $(jobs -p); do kill -TERM -- "-$j" 2>/dev/null || kill -TERM "$j" 2>/dev/null; done
  echo "interrupted (signal) during ${current:-no step}, $(date -u +%FT%TZ)" >> "$sum"
  publish
  exit 1
}
trap on_signal TERM INT HUP

start=$(date +%s) failed=0 skipped=0 ran=0
for i in "${!names[@]}"; do
  name=${names[$i]} box=${boxes[$i]}
  left=$((budget - ($(date +%s) - start)))
  if [ "$box" -gt "$left" ]; then
    echo "## $name skipped: its box is $box s, $left s of the budget left" >> "$sum"
    skipped=$((skipped + 1))
    continue
  fi
  current=$name
  mkdir -p "$work/$name"
  t0=$(date +%s)
  # its own process group under timeout, so that a step's children end with it
  OUT=$work/$name timeout --kill-after=5 "$box" bash -c "${cmds[$i]}" > "$work/$name.log" 2>&1 &
  pid=$!
  wait "$pid"
  rc=$?
  pid=""
  secs=$(($(date +%s) - t0))
  ran=$((ran + 1))
  # gpu-check.sh exits 0 with FAIL lines in its summary (a check or run that failed)
  nfail=$(cat "$work/$name/summary.txt" 2>/dev/null | grep -c '^FAIL')
  verdict=ok
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    verdict="timed out after $box s"
  elif [ "$rc" != 0 ]; then
    verdict=failed
  elif [ "$nfail" != 0 ]; then
    verdict="ran, $nfail FAIL line(s)"
  fi
  [ "$verdict" = ok ] || failed=$((failed + 1))
  {
    echo "## $name rc=$rc ${secs}s $verdict"
    if [ -s "$work/$name/summary.txt" ]; then
      sed 's/^/  /' "$work/$name/summary.txt"
    else
      grep -E '^== ' "$work/$name.log" | sed 's/^/  /'
      [ "$rc" = 0 ] || tail -n 3 "$work/$name.log" | sed 's/^/  | /'
    fi
  } >> "$sum"
  current=""
  publish
done
echo "queue done: $ran run, $failed not ok, $skipped skipped, $(($(date +%s) - start)) s" >> "$sum"
publish
cat "$out/summary.txt"
[ "$failed" = 0 ] && [ "$skipped" = 0 ]
