#!/usr/bin/env bash
# plugins/backends/cuda/embed.cmake, which turns a kernel source into the C array that NVRTC
# compiles: each `#include "name"` line is replaced by INCLUDE_DIR/name's text (NVRTC gets no
# include path), the array holds the source's bytes and a NUL, and an include it cannot find
# stops the build with a message naming the source, the line and the folder.
set -euo pipefail
embed=$(pwd)/plugins/backends/cuda/embed.cmake
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/inc"
printf '// header\n#define MARK_HEADER_7 7\n' > "$tmp/inc/part.cuh"
printf '// kernel; semicolons; [brackets]\n#include "part.cuh"\nint k = MARK_HEADER_7;\n' \
    > "$tmp/k.cu"

# the bytes of the generated array, decoded (the array ends with the NUL)
decode() {
    python3 -c 'import re, sys
sys.stdout.buffer.write(bytes(int(h, 16) for h in re.findall(r"0x([0-9a-f]{2})", open(sys.argv[1]).read())))' "$1"
}

cmake -DIN="$tmp/k.cu" -DOUT="$tmp/k.c" -DNAME=k_source -DINCLUDE_DIR="$tmp/inc" -P "$embed"
grep -q '^const char k_source\[\] = {' "$tmp/k.c" || { cat "$tmp/k.c"; exit 1; }
decode "$tmp/k.c" > "$tmp/got"
expected=$(printf '// kernel; semicolons; [brackets]\n// ---- part.cuh, inlined at build time ----\n// header\n#define MARK_HEADER_7 7\n\nint k = MARK_HEADER_7;\n')
got=$(tr -d '\000' < "$tmp/got")
[ "$got" = "$expected" ] || { echo "embedded text differs:"; diff <(echo "$expected") <(echo "$got"); exit 1; }
[ "$(tail -c 1 "$tmp/got" | od -An -tx1 | tr -d ' \n')" = 00 ] || { echo "no terminating NUL"; exit 1; }

# a source without includes needs no INCLUDE_DIR and is embedded byte for byte
printf 'plain\n' > "$tmp/p.cu"
cmake -DIN="$tmp/p.cu" -DOUT="$tmp/p.c" -DNAME=p_source -P "$embed"
[ "$(decode "$tmp/p.c" | tr -d '\000')" = plain ] || { echo "plain source changed"; exit 1; }

# an include that is not there fails, naming the source, the line and the folder
printf '#include "missing.cuh"\n' > "$tmp/m.cu"
if cmake -DIN="$tmp/m.cu" -DOUT="$tmp/m.c" -DNAME=m_source -DINCLUDE_DIR="$tmp/inc" \
    -P "$embed" > "$tmp/err" 2>&1; then
    echo "an unknown include was accepted"; exit 1
fi
grep -q 'm.cu: #include "missing.cuh": no such file' "$tmp/err" || { cat "$tmp/err"; exit 1; }
[ ! -e "$tmp/m.c" ] || { echo "a failed embed left its output"; exit 1; }
echo "embed.cmake: include inlined, bytes kept, missing include refused"
