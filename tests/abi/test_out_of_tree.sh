#!/usr/bin/env bash
# Install + out-of-tree plugin build (ctest passes the build dir as $1): `cmake --install` into
# a temporary prefix, build the template bundle alone against it twice (the CMake package via
# find_package(weft), and plain cc with `pkg-config weft`), and check both bundles with the
# installed `weft plugins check`, which loads each library in a child process. The bundle is
# also installed into the prefix (cmake --install of the standalone project).
set -euo pipefail
build=$(cd "${1:?usage: test_out_of_tree.sh BUILD_DIR}" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d /tmp/weft-oot-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$tmp/prefix" > "$tmp/install.log" || {
    cat "$tmp/install.log"; fail "cmake --install"; }
weft="$tmp/prefix/bin/weft"
[ -x "$weft" ] || fail "no installed weft binary in $tmp/prefix/bin"
for h in weft/plugin.h weft/graph.h weft/sdk.h; do
    [ -f "$tmp/prefix/include/$h" ] || fail "installed headers lack $h"
done
"$weft" --version | grep -q "plugin ABI" || fail "installed weft --version"
# Only the installed prefix: no build tree, no source tree, no user path.
export WEFT_PLUGIN_PATH=

name=template.drop-identity-scale
lib=libweft-template-drop-identity-scale.so

# 1. CMake package
cmake -S "$src/plugins/template" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
    -DCMAKE_BUILD_TYPE=Release > "$tmp/cm.log" 2>&1 || { cat "$tmp/cm.log"; fail "configure"; }
cmake --build "$tmp/cm" > "$tmp/cmb.log" 2>&1 || { cat "$tmp/cmb.log"; fail "build"; }
bundle="$tmp/cm/lib/weft/plugins/$name"
[ -f "$bundle/$lib" ] && [ -f "$bundle/manifest.yaml" ] || fail "bundle layout in $bundle"
out=$("$weft" plugins check "$bundle") || { echo "$out"; fail "plugins check (cmake build)"; }
echo "$out"
grep -q "^ok   $name 0.1.0 .*library loads, descriptor matches, create/destroy ok" <<< "$out" ||
    fail "expected the binary check to pass for the CMake-built bundle"
cmake --install "$tmp/cm" --prefix "$tmp/prefix" > /dev/null || fail "install the bundle"

# 2. pkg-config
pcdir=$(dirname "$(find "$tmp/prefix" -name weft.pc | head -1)")
[ -n "$pcdir" ] || fail "no weft.pc installed"
cflags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags weft) || fail "pkg-config --cflags weft"
plugindir=$(PKG_CONFIG_PATH="$pcdir" pkg-config --variable=plugindir weft)
[ -n "$plugindir" ] || fail "weft.pc has no plugindir"
mkdir -p "$tmp/pc/$name"
${CC:-cc} -std=c11 -O2 -fPIC -shared -fvisibility=hidden $cflags \
    "$src/plugins/template/drop_identity_scale.c" -o "$tmp/pc/$name/$lib" -lm ||
    fail "cc with pkg-config flags"
cp "$src/plugins/template/manifest.yaml" "$tmp/pc/$name/"
out=$("$weft" plugins check "$tmp/pc/$name") || { echo "$out"; fail "plugins check (pkg-config build)"; }
echo "$out"
grep -q "^ok   $name 0.1.0 .*create/destroy ok" <<< "$out" || fail "pkg-config bundle check"

echo "out-of-tree build: ok"
