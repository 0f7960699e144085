#!/usr/bin/env bash
# `weft candidate freeze | check | diff` end to end on a converted stories260K (ctest passes the
# build dir as $1): two manifests frozen; check passes on the untouched files and reports each
# changed model file and plugin library (exit 1) once they change; diff says "same" for a lock
# against itself (exit 0) and lists what differs between two candidates (exit 1); every usage
# error exits 2 with a message; a manifest naming a missing plugin fails naming it.
set -uo pipefail
build=$(cd "${1:?usage: test_candidate_cli.sh BUILD_DIR}" && pwd)
weft="$build/bin/weft"
shared=${WEFT_SHARED_DIR:-$(pwd)/../shared}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# shellcheck source=tests/cli_expect.sh
source "$(dirname "$0")/../cli_expect.sh"
export WEFT_CACHE=$tmp/cache

"$weft" convert llama2c "$shared/models/stories260K/stories260K.bin" \
    "$shared/models/stories260K/tok512.bin" "$tmp/model" > /dev/null || fail "convert"
manifest() { # name, techniques
    cat > "$tmp/$1.yaml" <<YAML
format: 1
candidate: $1
model: $tmp/model
backend: {name: cpu, options: {threads: 1}}
model_plugin: llama
techniques: [$2]
serving:
  max_model_len: 256
  max_concurrency: 1
YAML
}
manifest plain ""
manifest fused "fuse.rmsnorm-residual, fuse.swiglu"

# freeze: -o and the default place (<manifest dir>/frozen/<candidate>.lock)
"$weft" candidate freeze "$tmp/plain.yaml" -o "$tmp/plain.lock" > "$tmp/out" ||
    fail "freeze plain: $(cat "$tmp/out")"
grep -q "froze plain into $tmp/plain.lock" "$tmp/out" || fail "freeze's line: $(cat "$tmp/out")"
"$weft" candidate freeze "$tmp/fused.yaml" > /dev/null || fail "freeze fused"
[ -f "$tmp/frozen/fused.lock" ] || fail "no lock at the default place"
echo "ok: freeze"

# check: clean, then each kind of change named
out=$("$weft" candidate check "$tmp/plain.lock") || fail "check of an untouched lock: $out"
cp -r "$tmp/model" "$tmp/model.orig"
printf ' ' >> "$tmp/model/config.json"
out=$("$weft" candidate check "$tmp/plain.lock")
rc=$?
[ "$rc" = 1 ] || fail "check after config.json changed: exit $rc"
grep -q "config.json" <<< "$out" || fail "check does not name config.json: $out"
grep -q "problem(s): this lock does not describe the files on disk" <<< "$out" ||
    fail "check's summary: $out"
rm -rf "$tmp/model" && mv "$tmp/model.orig" "$tmp/model"
"$weft" candidate check "$tmp/plain.lock" > /dev/null || fail "check after the file came back"
# --no-cache hashes again instead of trusting the cache
"$weft" candidate check "$tmp/plain.lock" --no-cache > /dev/null || fail "check --no-cache"
echo "ok: check"

# diff
out=$("$weft" candidate diff "$tmp/plain.lock" "$tmp/plain.lock") || fail "diff of a lock with itself"
grep -q "^same candidate: id " <<< "$out" || fail "diff same: $out"
out=$("$weft" candidate diff "$tmp/plain.lock" "$tmp/frozen/fused.lock")
rc=$?
[ "$rc" = 1 ] || fail "diff of two candidates: exit $rc"
grep -q "^id [0-9a-f]* -> [0-9a-f]*$" <<< "$out" || fail "diff's id line: $out"
grep -q "fuse.swiglu" <<< "$out" || fail "diff does not name the added technique: $out"
grep -q "fuse.rmsnorm-residual" <<< "$out" || fail "diff does not name the added technique: $out"
echo "ok: diff"

expect_err() { expect_exit "$1" "$2" "$weft" candidate "${@:3}"; }
expect_err 2 "expected a candidate MANIFEST" freeze
expect_err 2 "expected one MANIFEST, found" freeze "$tmp/plain.yaml" "$tmp/fused.yaml"
expect_err 2 "unknown or incomplete option" freeze "$tmp/plain.yaml" --frob
expect_err 2 "unknown or incomplete option" freeze "$tmp/plain.yaml" -o
expect_err 2 "expected a LOCK" check
expect_err 2 "unexpected argument" check "$tmp/plain.lock" extra
expect_err 2 "expected two locks A B" diff "$tmp/plain.lock"
expect_err 2 "unknown subcommand 'frob'" frob
expect_err 1 "$tmp/none.lock" diff "$tmp/none.lock" "$tmp/plain.lock"
expect_err 1 "$tmp/none.lock" check "$tmp/none.lock"
manifest ghost "fuse.no-such-technique"
expect_err 1 "fuse.no-such-technique" freeze "$tmp/ghost.yaml" -o "$tmp/ghost.lock"
[ ! -e "$tmp/ghost.lock" ] || fail "a failed freeze left a lock"
echo "ok: errors"
echo "candidate freeze/check/diff: all passed"
