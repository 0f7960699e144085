#!/usr/bin/env bash
# `weft serve` when an engine step fails (ctest passes the build dir as $1), as a lost device
# would make it: fake.step-fails (plugins/fakes/step-fails) fails every step after its first
# `after`. The server must end the request in flight with an error (a streamed one with one
# `data: {"error": ...}` event and no [DONE], a plain one with a 5xx and code engine_error), report
# 503 "failed" with the reason on /health, refuse what comes after, and exit 1 on its own
# (docs/SERVE.md) rather than serve errors forever.
set -uo pipefail
build=$(cd "${1:?usage: test_serve_failure.sh BUILD_DIR}" && pwd)
weft="$build/bin/weft"
shared=${WEFT_SHARED_DIR:-$(pwd)/../shared}
tmp=$(mktemp -d)
pid=""
cleanup() {
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*" >&2
    [ -f "$tmp/serve.log" ] && tail -n 20 "$tmp/serve.log" >&2
    exit 1
}
export WEFT_CACHE=$tmp/cache WEFT_PLUGIN_PATH=$build/tests/eval-fakes

"$weft" convert llama2c "$shared/models/stories260K/stories260K.bin" \
    "$shared/models/stories260K/tok512.bin" "$tmp/stories260k" > /dev/null || fail "convert"
cat > "$tmp/c.yaml" <<YAML
format: 1
candidate: step-fails
model: $tmp/stories260k
backend: {name: cpu, options: {threads: 1}}
model_plugin: llama
techniques: [{name: fake.step-fails, options: {after: 8}}]
serving:
  max_model_len: 256
  max_concurrency: 2
YAML
"$weft" candidate freeze "$tmp/c.yaml" -o "$tmp/c.lock" > /dev/null || fail "freeze"

start() { # starts the server on a free port; sets pid and url
    "$weft" serve "$tmp/c.lock" --port 0 > "$tmp/serve.log" 2>&1 &
    pid=$!
    url=""
    for _ in $(seq 300); do
        url=$(grep -o 'listening on http://[0-9.]*:[0-9]*' "$tmp/serve.log" | sed 's/listening on //')
        [ -n "$url" ] && curl -sf "$url/health" 2> /dev/null | grep -q '"ok"' && return 0
        kill -0 "$pid" 2> /dev/null || fail "the server exited while starting"
        sleep 0.1
    done
    fail "the server did not become ready"
}
finish() { # the server must exit 1 on its own
    local rc
    for _ in $(seq 300); do
        kill -0 "$pid" 2> /dev/null || break
        sleep 0.1
    done
    kill -0 "$pid" 2> /dev/null && fail "the server still runs 30 s after its engine failed"
    wait "$pid"
    rc=$?
    pid=""
    [ "$rc" = 1 ] || fail "the server exited $rc after an engine failure, expected 1"
    grep -q "engine failure: .*injected failure" "$tmp/serve.log" || fail "the log does not say why"
}
body='"model": "stories260k", "prompt": "Once upon a time", "max_tokens": 40, "temperature": 0'

# a streamed request: tokens, then one error event, no [DONE]
start
curl -sN "$url/v1/completions" -H 'content-type: application/json' \
    -d "{$body, \"stream\": true}" > "$tmp/stream.txt" || fail "stream request: curl $?"
grep -q "^data: {\"id\"" "$tmp/stream.txt" || { cat "$tmp/stream.txt"; fail "no token event before the failure"; }
tail -n 3 "$tmp/stream.txt" | grep -q '^data: {"error":.*"code":"engine_error"' ||
    { cat "$tmp/stream.txt"; fail "the stream does not end with an engine_error event"; }
! grep -q '^data: \[DONE\]' "$tmp/stream.txt" || fail "a failed stream ended with [DONE]"
# /health says failed with the reason, while the server winds down (or it is already gone)
code=$(curl -s -o "$tmp/health.json" -w '%{http_code}' "$url/health")
if [ "$code" != 000 ]; then
    [ "$code" = 503 ] && grep -q '"status":"failed"' "$tmp/health.json" &&
        grep -q 'injected failure' "$tmp/health.json" ||
        fail "/health after the failure: $code $(cat "$tmp/health.json")"
    code=$(curl -s -o "$tmp/after.json" -w '%{http_code}' "$url/v1/completions" \
        -H 'content-type: application/json' -d "{$body}")
    case "$code" in 000 | 5*) ;; *) fail "a request after the failure got $code" ;; esac
fi
finish
echo "ok: a streamed request ends with an error event; /health failed; exit 1"

# a plain request: a 5xx with code engine_error
start
code=$(curl -s -o "$tmp/plain.json" -w '%{http_code}' "$url/v1/completions" \
    -H 'content-type: application/json' -d "{$body}")
case "$code" in 5*) ;; *) fail "a plain request in a failing step got $code" ;; esac
grep -q '"code":"engine_error"' "$tmp/plain.json" || fail "plain request's body: $(cat "$tmp/plain.json")"
finish
echo "ok: a plain request gets a 5xx with engine_error; exit 1"
echo "serve failure: all passed"
