#!/usr/bin/env bash
# `weft plugins check` on the fake plugins (ctest passes the build dir as $1): each good fake
# passes its binary check, each bad one fails with its exact reason, the crashing constructor
# is reported by signal without killing the command, and the exit status says whether all
# passed.
set -uo pipefail
build=$(cd "${1:?usage: test_plugins_check.sh BUILD_DIR}" && pwd)
weft="$build/bin/weft"
fakes="$build/tests/fakes"
fail() { echo "FAIL: $*" >&2; exit 1; }

for good in fake.good fake.no-optional fake.pass fake.op fake.model fake.backend; do
    out=$("$weft" plugins check "$fakes/$good") || { echo "$out"; fail "$good should pass"; }
    grep -q "library loads, descriptor matches, create/destroy ok" <<< "$out" || fail "$good: $out"
done

expect_fail() { # bundle, expected reason line
    local out rc
    out=$("$weft" plugins check "$fakes/$1")
    rc=$?
    [ "$rc" -eq 1 ] || { echo "$out"; fail "$1: expected exit status 1, got $rc"; }
    grep -qF -- "$2" <<< "$out" || { echo "$out"; fail "$1: expected '$2'"; }
}
expect_fail fake.abi7 "plugin fake.abi7 1.0.0: built for ABI 7, this runtime speaks 1..1"
expect_fail fake.old-size "plugin fake.old-size 1.0.0: descriptor size 48 is smaller than the ABI v1 descriptor"
expect_fail fake.create-fails "plugin fake.create-fails 1.0.0: create failed: refusing to start: no device"
expect_fail fake.wrong-name "descriptor name 'fake.other' differs from manifest name 'fake.wrong-name'"
expect_fail fake.reserved "descriptor reserved[2] is 0xdeadbeef, expected 0"
expect_fail fake.crash-load "crashed with signal 11 (Segmentation fault) while loading $fakes/fake.crash-load/libweft-fake-crash-load.so"

# all of them at once: the crash does not stop the others from being checked
out=$("$weft" plugins check "$fakes"/*)
rc=$?
[ "$rc" -eq 1 ] || fail "mixed set: expected exit status 1, got $rc"
grep -q "^6 of 12 bundle(s) passed$" <<< "$out" || { echo "$out"; fail "mixed set summary"; }
echo "plugins check: ok"
