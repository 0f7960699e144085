#!/usr/bin/env bash
# weft serve against third-party tools: schemathesis fuzzes every endpoint from docs/openapi.yaml
# (no 5xx, every status code and body as documented, schema-invalid requests refused), then
# NVIDIA AIPerf runs short streaming chat and non-streaming completions profiles that must finish
# with zero errors. Bounded for CI: a few hundred requests each.
source "$(dirname "$0")/serve_setup.sh" "$1"
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(dirname "$WEFT_PY")
log=$SERVE_TMP/serve.log
"$WEFT_BIN" serve "$WEFT_SERVE_CHAT_LOCK" --port 0 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -rf "$SERVE_TMP"' EXIT
port=""
for _ in $(seq 300); do
  port=$(sed -n 's|.*listening on http://[^:]*:\([0-9]*\).*|\1|p' "$log")
  [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
  sleep 0.1
done
url=http://127.0.0.1:$port
curl -sf "$url/health" >/dev/null || { cat "$log"; exit 1; }

echo "== schemathesis"
(cd "$SERVE_TMP" && "$bin/st" run "$root/docs/openapi.yaml" --url "$url" \
  --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,negative_data_rejection \
  --max-examples 25 --request-timeout 30 --seed 1 --no-color)

echo "== aiperf"
run_aiperf() { # name endpoint-type [extra args]
  local name=$1 ep=$2; shift 2
  (cd "$SERVE_TMP" && "$bin/aiperf" profile --model stories260k --url "$url" --endpoint-type "$ep" \
    --tokenizer "$WEFT_SERVE_MODEL_DIR" --synthetic-input-tokens-mean 32 \
    --synthetic-input-tokens-stddev 0 --output-tokens-mean 48 --output-tokens-stddev 0 \
    --extra-inputs ignore_eos:true --request-count 60 --concurrency 4 --ui-type none \
    --artifact-dir "$SERVE_TMP/aiperf-$name" "$@" >"$SERVE_TMP/aiperf-$name.txt" 2>&1) || {
      tail -40 "$SERVE_TMP/aiperf-$name.txt"; exit 1; }
  "$WEFT_PY" - "$SERVE_TMP/aiperf-$name/profile_export_aiperf.json" "$name" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
count = d["request_count"]["avg"]
errors = (d.get("error_request_count") or {}).get("avg", 0)
assert d.get("was_cancelled") in (False, None), d.get("was_cancelled")
assert count == 60 and errors == 0, (count, errors, d.get("error_summary"))
line = f"aiperf {sys.argv[2]}: {count:.0f} requests, 0 errors"
for key in ("time_to_first_token", "inter_token_latency", "request_latency"):
    m = d.get(key)
    if m and m.get("p50") is not None:
        line += f", {key} p50 {m['p50']:.2f} ms p99 {m['p99']:.2f} ms"
print(line)
PY
}
run_aiperf chat-stream chat --streaming
run_aiperf completions completions
curl -sf "$url/health" >/dev/null || { echo "not healthy after the runs"; tail -20 "$log"; exit 1; }
kill -TERM $pid
status=0
wait $pid || status=$?
[ $status = 0 ] || { echo "weft serve exited with $status after SIGTERM"; tail -20 "$log"; exit 1; }
