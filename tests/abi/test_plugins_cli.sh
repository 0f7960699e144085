#!/usr/bin/env bash
# `weft plugins list` and `weft plugins show` on bundles written here (ctest passes the build dir
# as $1): the table's rows for a good, a broken and a shadowed bundle; --json parsed by Python's
# json module with every field checked; show's lines for a manifest using every field (options of
# each type with their defaults, ranges and values, requires / conflicts / after, platforms,
# services); and each usage error or unknown plugin answered with its message and exit status
# (2 for usage, 1 for a plugin not found), never silently.
set -uo pipefail
build=$(cd "${1:?usage: test_plugins_cli.sh BUILD_DIR}" && pwd)
weft="$build/bin/weft"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# shellcheck source=tests/cli_expect.sh
source "$(dirname "$0")/../cli_expect.sh"
py=${WEFT_PYTHON:-python3}

mkdir -p "$tmp/a/fake.show" "$tmp/a/fake.broken" "$tmp/a/fake.twice" "$tmp/b/fake.twice"
cat > "$tmp/a/fake.show/manifest.yaml" <<'EOF'
format: 1
name: fake.show
kind: technique
version: 2.3.4
abi: {min: 1, max: 3}
library: libweft-fake-show.so
summary: "a manifest with every field"
platforms:
  - {arch: x86_64, cuda: 13, sm: [80, 90]}
  - {arch: aarch64}
backends: [cpu, cuda]
slots: [pass]
services: [graph, device]
requires:
  - {name: fuse.swiglu, version: "^0.1"}
  - kv.paged
conflicts: [fuse.linear-add-norm]
after: [fuse.rmsnorm-residual, fuse.swiglu]
options:
  rows: {type: int, default: 4, min: 1, max: 64, help: "rows a block"}
  ratio: {type: float, default: 0.5, min: 0, max: 1}
  fast: {type: bool, default: true}
  tag: {type: string, default: "abc"}
  layout: {type: enum, default: hnd, values: [nhd, hnd]}
helps_when: "always, in this test"
EOF
printf 'format: 1\nname: fake.broken\nkind: technique\n' > "$tmp/a/fake.broken/manifest.yaml"
for d in a b; do
    cat > "$tmp/$d/fake.twice/manifest.yaml" <<EOF
format: 1
name: fake.twice
kind: feature
version: 1.0.0
abi: {min: 1, max: 1}
library: libweft-fake-twice.so
summary: "in $d"
backends: [cpu]
slots: [feature]
EOF
done

# list, as a table
out=$("$weft" plugins list --path "$tmp/a" --path "$tmp/b") || fail "list exited $?"
grep -qE '^NAME +VERSION +KIND +SLOTS +BACKENDS +STATUS +BUNDLE$' <<< "$out" || fail "list header"
grep -qE "^fake\.show +2\.3\.4 +technique +pass +cpu,cuda +ok +$tmp/a/fake\.show$" <<< "$out" ||
    { echo "$out"; fail "fake.show row"; }
grep -qE "^fake\.broken +- +- +- +- +broken +$tmp/a/fake\.broken$" <<< "$out" ||
    { echo "$out"; fail "fake.broken row"; }
grep -qF "    error: $tmp/a/fake.broken/manifest.yaml" <<< "$out" || fail "broken bundle's error line"
grep -qE "^fake\.twice +1\.0\.0 +feature +feature +cpu +ok +$tmp/a/fake\.twice$" <<< "$out" ||
    { echo "$out"; fail "first fake.twice row"; }
grep -qE "^fake\.twice .* shadowed +$tmp/b/fake\.twice$" <<< "$out" ||
    { echo "$out"; fail "second fake.twice row"; }
grep -qF "    shadowed by $tmp/a/fake.twice" <<< "$out" || fail "shadowed-by line"
grep -qE '^cpu +[0-9.]+ +backend ' <<< "$out" || fail "the build's own cpu backend not listed"
echo "ok: list"

# list --json, read by Python's json module
"$weft" plugins list --json --path "$tmp/a" --path "$tmp/b" > "$tmp/list.json" ||
    fail "list --json exited $?"
TMPDIR_A="$tmp/a" TMPDIR_B="$tmp/b" "$py" - "$tmp/list.json" <<'EOF' || fail "list --json content"
import json, os, sys
doc = json.load(open(sys.argv[1]))
a, b = os.environ["TMPDIR_A"], os.environ["TMPDIR_B"]
assert doc["search_path"][:2] == [a, b], doc["search_path"]
by = {}
for p in doc["plugins"]:
    by.setdefault(p["name"], []).append(p)
show = by["fake.show"][0]
want = {"name": "fake.show", "status": "ok", "bundle_dir": a + "/fake.show", "version": "2.3.4",
        "kind": "technique", "slots": ["pass"], "backends": ["cpu", "cuda"],
        "library": "libweft-fake-show.so", "summary": "a manifest with every field"}
for k, v in want.items():
    assert show[k] == v, (k, show[k], v)
assert show["origin"], show
broken = by["fake.broken"][0]
assert broken["status"] == "broken" and "manifest.yaml" in broken["error"], broken
assert "version" not in broken, broken
twice = by["fake.twice"]
assert [t["status"] for t in twice] == ["ok", "shadowed"], twice
assert twice[1]["shadowed_by"] == a + "/fake.twice", twice[1]
assert twice[0]["summary"] == "in a", twice[0]
assert by["cpu"][0]["kind"] == "backend", by["cpu"]
print("json ok:", len(doc["plugins"]), "entries")
EOF
echo "ok: list --json"

# show: every field of the manifest
out=$("$weft" plugins show fake.show --path "$tmp/a") || fail "show exited $?"
expect_line() { grep -qxF -- "$1" <<< "$out" || { echo "$out"; fail "show lacks: $1"; }; }
expect_line "plugin        fake.show 2.3.4"
expect_line "kind          technique"
expect_line "summary       a manifest with every field"
expect_line "bundle        $tmp/a/fake.show"
expect_line "library       libweft-fake-show.so"
expect_line "abi           1..3"
expect_line "slots         pass"
expect_line "backends      cpu, cuda"
expect_line "platforms     x86_64 cuda 13 sm 80,90; aarch64"
expect_line "requires      fuse.swiglu ^0.1, kv.paged *"
expect_line "conflicts     fuse.linear-add-norm *"
expect_line "after         fuse.rmsnorm-residual, fuse.swiglu"
expect_line "services      graph, device"
expect_line "helps when    always, in this test"
expect_line "  rows                 int    default 4, range 1..64"
expect_line "                       rows a block"
expect_line "  ratio                float  default 0.5, range 0..1"
expect_line "  fast                 bool   default true"
expect_line "  tag                  string default abc"
expect_line "  layout               enum   default hnd, one of nhd|hnd"
out=$("$weft" plugins show fake.show@^2 --path "$tmp/a") || fail "show with a matching range"
echo "ok: show"

# errors: a message on stderr and the exit status, never silence
expect_err() { expect_exit "$1" "$2" "$weft" plugins "${@:3}"; }
expect_err 1 "no plugin fake.shw on the plugin path: did you mean fake.show" show fake.shw --path "$tmp/a"
expect_err 1 "no plugin fake.show matching ^3 on the plugin path" show fake.show@^3 --path "$tmp/a"
expect_err 1 'expected a version like 1.2.3' show fake.show@bad --path "$tmp/a"
expect_err 2 "expected one plugin NAME" show
expect_err 2 "expected one plugin NAME" show fake.show kv.paged
expect_err 2 "unknown option --frob" show fake.show --frob
expect_err 2 "--path needs a directory" show fake.show --path
expect_err 2 "unexpected argument extra" list extra
expect_err 2 "unknown option --frob" list --frob
expect_err 2 "unknown subcommand 'frob'" frob
expect_err 2 "usage: weft plugins" ""
many=()
for _ in $(seq 300); do many+=(x); done
expect_err 2 "too many arguments" list "${many[@]}"
expect_err 2 "too many arguments" show "${many[@]}"
"$weft" plugins show --help | grep -q "usage: weft plugins show" || fail "show --help"
"$weft" plugins list --help | grep -q "usage: weft plugins list" || fail "list --help"
echo "ok: errors"
echo "plugins list/show: all passed"
