#!/usr/bin/env bash
# The test suite, as CI runs it: release build + every test, the same under ASan/UBSan, each
# fuzz target for a bounded time over its corpus, and valgrind on the loader and parsers.
#   tools/scripts/test.sh            everything
#   WEFT_FUZZ_SECONDS=N              seconds per fuzz target (default 20)
#   WEFT_FUZZ_SEED=N                 libFuzzer seed (default 1, so CI replays the same inputs;
#                                    0 = a fresh seed each run, for exploratory fuzzing)
#   WEFT_TEST_SKIP="asan fuzz valgrind" skips stages (for quick local runs)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
tools/scripts/deps.sh
export WEFT_SHARED_DIR=${WEFT_SHARED_DIR:-$root/../shared}
export WEFT_MODEL_MIRROR=${WEFT_MODEL_MIRROR:-$WEFT_SHARED_DIR/models}
export WEFT_CACHE=${WEFT_CACHE:-$root/build/test-cache}
jobs=$(nproc)
skip=" ${WEFT_TEST_SKIP:-} "
stage() { echo; echo "=== $* ==="; }

# Python reference tools used by integration tests (openai SDK, ...).
if [ -f tools/scripts/requirements.txt ]; then
  stage "python venv"
  [ -x build/venv/bin/python ] || python3 -m venv build/venv
  build/venv/bin/pip install -q -r tools/scripts/requirements.txt
  export WEFT_PYTHON=$root/build/venv/bin/python
fi

stage "release build and tests"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs"
# --timeout: a test that hangs (a failed assertion can leave a test's server process running)
# fails after 15 minutes instead of holding CI
ctest --test-dir build --output-on-failure --timeout 900 -j"$jobs"

if [[ $skip != *" asan "* ]]; then
  stage "ASan + UBSan build and tests"
  cmake -S . -B build-asan -DWEFT_SANITIZE=ON -DWEFT_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug >/dev/null
  cmake --build build-asan -j"$jobs"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure --timeout 900 -j"$jobs"
fi

if [[ $skip != *" fuzz "* ]]; then
  stage "fuzz targets (${WEFT_FUZZ_SECONDS:-20}s each)"
  CC=clang cmake -S . -B build-fuzz -DWEFT_FUZZ=ON -DWEFT_BUILD_TESTS=OFF -DWEFT_CUDA=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build-fuzz -j"$jobs"
  # -timeout: one input running longer than 60 s is a failure (libFuzzer's default of 1,200 s
  # once let a hang cost CI 20 minutes). On a failure, the end of the log and the input that
  # caused it (base64) are printed, since a CI clone's files are gone once it ends.
  for f in build-fuzz/fuzz/fuzz_*; do
    [ -x "$f" ] || continue
    name=$(basename "$f"); corpus=tests/fuzz/corpus/${name#fuzz_}
    mkdir -p "$corpus"
    work=$(mktemp -d)
    echo "fuzzing $name"
    mkdir "$work/new"
    dict=()  # a target's dictionary, when it has one (tests/fuzz/<name>.dict)
    [ -f "tests/fuzz/${name#fuzz_}.dict" ] && dict=(-dict="tests/fuzz/${name#fuzz_}.dict")
    if ! "$f" "${dict[@]}" -max_total_time="${WEFT_FUZZ_SECONDS:-20}" -seed="${WEFT_FUZZ_SEED:-1}" \
        -timeout=60 -max_len=65536 -rss_limit_mb=2048 -print_final_stats=0 \
        -artifact_prefix="$work/" "$work/new" "$corpus" > "$work/out" 2>&1; then
      tail -n 60 "$work/out"
      for a in "$work"/crash-* "$work"/timeout-* "$work"/oom-* "$work"/leak-*; do
        [ -f "$a" ] || continue
        echo "reproducer $(basename "$a") (base64; decode and run: $f FILE):"
        base64 "$a" | head -c 20000; echo
      done
      exit 1
    fi
    tail -n 3 "$work/out"
    rm -rf "$work"
  done
fi

if [[ $skip != *" valgrind "* ]]; then
  stage "valgrind: loader and parsers"
  for t in test_manifest test_loader test_lock test_safetensors test_config test_tokenizer test_file \
    test_pull test_convert test_chat; do
    [ -x build/tests/$t ] || continue
    echo "valgrind $t"
    valgrind --quiet --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
      build/tests/$t >/dev/null
  done
fi
echo; echo "all tests passed"
