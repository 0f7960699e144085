#!/usr/bin/env bash
# The plugin ABI end to end through the real CLI and engine, on the fake plugins (ctest passes
# the build dir as $1; candidates and the fake checkpoint are in tests/data/abi):
#  1. fake backend + model + pass + op: freeze, check, and `candidate graph` prints the node the
#     pass added with the plugin the op registry chose for every node, and a stable hash;
#  2. without fake.op the pass's node has no implementation: refused, naming node, op, backend,
#     dtype and layout;
#  3. two passes run in the candidate's order unless a manifest's `after` says otherwise, and
#     the printed graph shows which ran first;
#  4. every loader refusal class, frozen into a lock and loaded by `weft run` and `weft
#     candidate graph`: one exact sentence on stderr, exit status 1; the constructor crash
#     kills the loading process by SIGSEGV and `weft plugins check` names it.
# Numbers (logits, the pass's factor, the op's call count) are checked by test_abi_engine.c.
set -uo pipefail
build=$(cd "${1:?usage: test_engine_fakes.sh BUILD_DIR}" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
weft="$build/bin/weft"
fakes="$build/tests/fakes"
data="$src/tests/data/abi"
tmp=$(mktemp -d /tmp/weft-abi-e2e-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export WEFT_PLUGIN_PATH="$fakes" WEFT_CACHE="$tmp/cache"
fail() { echo "FAIL: $*" >&2; exit 1; }

# run_ok NAME CMD...: runs CMD, keeps stdout in $tmp/NAME.out, fails on a non-zero status
run_ok() {
    local name=$1
    shift
    "$@" > "$tmp/$name.out" 2> "$tmp/$name.err" ||
        { cat "$tmp/$name.out" "$tmp/$name.err"; fail "$name: exit status $? from $*"; }
}
# has NAME LINE: the output of NAME holds LINE as a whole line
has() { grep -qFx -- "$2" "$tmp/$1.out" || { cat "$tmp/$1.out"; fail "$1: expected line '$2'"; }; }
hash_of() { sed -n 's/^hash \([0-9a-f]\{32\}\)$/\1/p' "$tmp/$1.out"; }
# refused NAME STATUS MESSAGE CMD...: exits with STATUS, stderr is exactly MESSAGE, no stdout
refused() {
    local name=$1 want_rc=$2 want=$3 rc
    shift 3
    "$@" > "$tmp/$name.out" 2> "$tmp/$name.err"
    rc=$?
    [ "$rc" -eq "$want_rc" ] || { cat "$tmp/$name.err"; fail "$name: expected status $want_rc, got $rc"; }
    [ "$(cat "$tmp/$name.err")" = "$want" ] ||
        { cat "$tmp/$name.err"; fail "$name: expected exactly '$want'"; }
    [ ! -s "$tmp/$name.out" ] || { cat "$tmp/$name.out"; fail "$name: unexpected output"; }
}

# ---- 1. the whole candidate from the fakes ---------------------------------------------------
run_ok freeze "$weft" candidate freeze "$data/full.yaml" -o "$tmp/full.lock"
has freeze "  backend    cpu 0.0.1"
has freeze "  technique  fake.pass 1.0.0"
has freeze "  technique  fake.op 1.0.0"
has freeze "  model      $data/model (2 file(s) pinned)"
run_ok check "$weft" candidate check "$tmp/full.lock"
has check "ok: 11 file(s) match the lock" # manifest, 4 x (library, manifest), 2 model files

run_ok graph1 "$weft" candidate graph "$tmp/full.lock"
run_ok graph2 "$weft" candidate graph "$tmp/full.lock"
cmp -s "$tmp/graph1.out" "$tmp/graph2.out" || fail "two runs of candidate graph differ"
has graph1 "graph: 4 nodes, 9 tensors, bucket tokens=1 seqs=1 logits=1"
has graph1 "   0 embed: embed(in.tokens:i32[1], embed:f32[16,8]) -> embed_out:f32[1,8]  [cpu]"
has graph1 "   1 norm: rmsnorm(embed_out:f32[1,8], norm:f32[8]) -> norm_out:f32[1,8] f=[9.99999975e-06]  [cpu]"
has graph1 "   2 fake.pass.scale: scale(norm_out:f32[1,8]) -> fake.pass.scaled:f32[1,8] f=[2]  [fake.op]"
has graph1 "   3 lm_head: lm_head(fake.pass.scaled:f32[1,8], lm_head:f32[16,8]) -> out.logits:f32[1,16]  [cpu]"
full_hash=$(hash_of graph1)
[ -n "$full_hash" ] || { cat "$tmp/graph1.out"; fail "no 'hash <32 hex>' line"; }

# a prefill bucket: the same nodes over 4 rows, a different graph and hash
run_ok graph4 "$weft" candidate graph --tokens 4 "$tmp/full.lock"
has graph4 "   2 fake.pass.scale: scale(norm_out:f32[4,8]) -> fake.pass.scaled:f32[4,8] f=[2]  [fake.op]"
[ "$(hash_of graph4)" != "$full_hash" ] || fail "buckets of 1 and 4 tokens hash alike"

# without the pass: the model's three nodes and another hash
run_ok plain "$weft" candidate graph "$data/plain.yaml"
has plain "   2 lm_head: lm_head(norm_out:f32[1,8], lm_head:f32[16,8]) -> out.logits:f32[1,16]  [cpu]"
grep -q scale "$tmp/plain.out" && fail "plain candidate has a scale node"
plain_hash=$(hash_of plain)
[ -n "$plain_hash" ] && [ "$plain_hash" != "$full_hash" ] || fail "plain and full hash alike"

# the real cpu backend also implements SCALE: fake.op's priority decides, and the graph (so its
# hash) does not depend on which plugin runs a node
run_ok real "$weft" candidate graph "$data/real-cpu.yaml"
has real "   2 fake.pass.scale: scale(norm_out:f32[1,8]) -> fake.pass.scaled:f32[1,8] f=[2]  [fake.op]"
[ "$(hash_of real)" = "$full_hash" ] || fail "same graph on another backend build hashes differently"
run_ok low "$weft" candidate graph "$data/real-cpu-low.yaml"
has low "   2 fake.pass.scale: scale(norm_out:f32[1,8]) -> fake.pass.scaled:f32[1,8] f=[2]  [cpu]"

# ---- 2. the pass's node with nothing to run it ----------------------------------------------
run_ok freeze_noop "$weft" candidate freeze "$data/no-op.yaml" -o "$tmp/no-op.lock"
run_ok check_noop "$weft" candidate check "$tmp/no-op.lock" # the files are fine; the graph is not
why="ops: node fake.pass.scale (scale, cpu, f32, layout dense) has no implementation in this candidate"
refused graph_noop 1 "weft candidate graph: $why" "$weft" candidate graph "$tmp/no-op.lock"
refused run_noop 1 "weft run: $why" "$weft" run --candidate "$tmp/no-op.lock" hello

# ---- 3. pass order ---------------------------------------------------------------------------
# listed fake.pass first: it adds SCALE(x, 1), then the drop pass removes it (the model's graph
# again, same hash; fake.pass's orphan output tensor is not part of the canonical text)
run_ok pass_first "$weft" candidate graph "$data/order-pass-first.yaml"
has pass_first "graph: 3 nodes, 9 tensors, bucket tokens=1 seqs=1 logits=1"
grep -q scale "$tmp/pass_first.out" && fail "pass-first: the drop pass did not run after fake.pass"
[ "$(hash_of pass_first)" = "$plain_hash" ] || fail "pass-first graph differs from the model's"
# listed the drop pass first: nothing to drop yet, then fake.pass adds SCALE(x, 1)
run_ok drop_first "$weft" candidate graph "$data/order-drop-first.yaml"
has drop_first "   2 fake.pass.scale: scale(norm_out:f32[1,8]) -> fake.pass.scaled:f32[1,8] f=[1]  [fake.op]"
order_hash=$(hash_of drop_first)
# a fake.pass bundle whose manifest says `after: [template.drop-identity-scale]`, first on the
# path: the pass-first listing now runs the drop pass first, in the lock and in the graph
mkdir -p "$tmp/after/fake.pass"
cp "$data/after-drop/manifest.yaml" "$fakes/fake.pass/libweft-fake-pass.so" "$tmp/after/fake.pass/"
WEFT_PLUGIN_PATH="$tmp/after:$fakes" run_ok freeze_after "$weft" candidate freeze \
    "$data/order-pass-first.yaml" -o "$tmp/after.lock"
grep -A1 -Fx "  technique  template.drop-identity-scale 0.1.0" "$tmp/freeze_after.out" |
    grep -qFx "  technique  fake.pass 1.0.0" || { cat "$tmp/freeze_after.out"; fail "lock order"; }
run_ok graph_after "$weft" candidate graph "$tmp/after.lock"
has graph_after "   2 fake.pass.scale: scale(norm_out:f32[1,8]) -> fake.pass.scaled:f32[1,8] f=[1]  [fake.op]"
[ "$(hash_of graph_after)" = "$order_hash" ] || fail "after: graph differs from drop-first"

# ---- 4. loader refusals through a lock -------------------------------------------------------
bad_candidate() { # FAKE -> $tmp/bad-FAKE.yaml: the fake backend and model plus that technique
    printf 'format: 1\ncandidate: abi-bad\nmodel: %s\nbackend: {name: cpu, version: "=0.0.1"}\nmodel_plugin: fake.model\ntechniques: [%s]\n' \
        "$data/model" "$1" > "$tmp/bad-$1.yaml"
}
# refused_at_load FAKE MESSAGE: freezes (no binary is opened), then both loaders refuse
refused_at_load() {
    bad_candidate "$1"
    run_ok "freeze-$1" "$weft" candidate freeze "$tmp/bad-$1.yaml" -o "$tmp/bad-$1.lock"
    refused "run-$1" 1 "weft run: $2" "$weft" run --candidate "$tmp/bad-$1.lock" hello
    refused "graph-$1" 1 "weft candidate graph: $2" "$weft" candidate graph "$tmp/bad-$1.lock"
}
refused_at_load fake.old-size "fake.old-size: plugin fake.old-size 1.0.0: descriptor size 48 is smaller than the ABI v1 descriptor (216 bytes)"
refused_at_load fake.wrong-name "fake.wrong-name: plugin fake.wrong-name 1.0.0: descriptor name 'fake.other' differs from manifest name 'fake.wrong-name'"
refused_at_load fake.create-fails "fake.create-fails: plugin fake.create-fails 1.0.0: create failed: refusing to start: no device"
refused_at_load fake.reserved "fake.reserved: plugin fake.reserved 1.0.0: descriptor reserved[2] is 0xdeadbeef, expected 0 (reserved fields must be zero)"

# ABI 7: its honest manifest is refused when resolving, so nothing is frozen ...
bad_candidate fake.abi7
abi7="resolve: feature fake.abi7 1.0.0 speaks plugin ABI 7..7 but this runtime speaks 1..1: use a build of fake.abi7 for this runtime"
refused freeze-abi7 1 "weft candidate freeze: $abi7" "$weft" candidate freeze "$tmp/bad-fake.abi7.yaml" -o "$tmp/x.lock"
refused run-abi7-manifest 1 "weft run: $abi7" "$weft" run --candidate "$tmp/bad-fake.abi7.yaml" hello
[ ! -e "$tmp/x.lock" ] || fail "abi7: a lock was written"
# ... and a manifest that claims ABI 1 for that library is refused by the loader's negotiation
mkdir -p "$tmp/liar/fake.abi7"
cp "$data/abi7-claims-v1/manifest.yaml" "$fakes/fake.abi7/libweft-fake-abi7.so" "$tmp/liar/fake.abi7/"
WEFT_PLUGIN_PATH="$tmp/liar:$fakes" refused_at_load fake.abi7 \
    "fake.abi7: plugin fake.abi7 1.0.0: built for ABI 7, this runtime speaks 1..1 (plugin says: speaks ABI 7..7, the host speaks 1..1)"

# a constructor that writes through NULL kills the process that loads it (docs/ABI.md); under
# ASan the signal must reach the process, not the sanitizer's report
bad_candidate fake.crash-load
run_ok freeze-crash "$weft" candidate freeze "$tmp/bad-fake.crash-load.yaml" -o "$tmp/crash.lock"
# (an inner shell waits on it, so its "Segmentation fault" note lands in crash.out)
ASAN_OPTIONS=handle_segv=0 bash -c '"$@"; exit $?' _ "$weft" run --candidate "$tmp/crash.lock" \
    hello > "$tmp/crash.out" 2>&1
rc=$?
[ "$rc" -eq 139 ] || { cat "$tmp/crash.out"; fail "crash-load: expected death by SIGSEGV (139), got $rc"; }
# the bundle the lock pins, checked in a child process, is reported by name and signal
bundle=$(sed -n 's/^ *"bundle": "\(.*fake.crash-load\)",$/\1/p' "$tmp/crash.lock")
[ "$bundle" = "$fakes/fake.crash-load" ] || fail "crash lock pins bundle '$bundle'"
"$weft" plugins check "$bundle" > "$tmp/crash-check.out" 2>&1
[ $? -eq 1 ] || fail "plugins check on the crashing bundle should exit 1"
grep -qF "crashed with signal 11 (Segmentation fault) while loading $bundle/libweft-fake-crash-load.so" \
    "$tmp/crash-check.out" || { cat "$tmp/crash-check.out"; fail "crash not reported"; }

echo "engine on fakes: ok"
