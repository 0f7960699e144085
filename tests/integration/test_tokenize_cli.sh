#!/usr/bin/env bash
# `weft tokenize` end to end (ctest passes the build dir as $1): the Qwen3 tokenizer.json's ids
# for a set of texts (ASCII, CJK, emoji, digits, whitespace runs, a chat special token) equal
# Hugging Face `tokenizers`' (the venv's WEFT_PYTHON; skipped without it), from arguments and
# from stdin; --no-special treats a special token as text like HF's split_special_tokens;
# --decode gives the text back; --pieces prints one line a token with control bytes escaped;
# --model DIR finds tokenizer.json there; a vocab GGUF (llama.cpp's phi-3) matches llama.cpp's
# own vector for one line; and each usage error exits 2 and a missing file 1, with a message.
set -uo pipefail
build=$(cd "${1:?usage: test_tokenize_cli.sh BUILD_DIR}" && pwd)
weft="$build/bin/weft"
shared=${WEFT_SHARED_DIR:-$(pwd)/../shared}
T=$shared/models/qwen3-tokenizer/tokenizer.json
[ -f "$T" ] || { echo "SKIP: no $T"; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# shellcheck source=tests/cli_expect.sh
source "$(dirname "$0")/../cli_expect.sh"

texts=("Hello world" "The quick brown fox jumps over the lazy dog." "数学 is 你好世界"
       "emoji 🙂🚀 and numbers 1234567 3.14159" "  leading   and trailing spaces  "
       $'tabs\tand\nnewlines\n\n' "<|im_start|>user hi<|im_end|>" "don't won't I'm")
: > "$tmp/weft.txt"
for t in "${texts[@]}"; do
    printf '%s' "$t" | "$weft" tokenize --tokenizer "$T" - >> "$tmp/weft.txt" ||
        fail "tokenize exited $? on: $t"
done
# arguments are joined by spaces: the same ids as the joined text from stdin
a=$("$weft" tokenize --tokenizer "$T" Hello world) || fail "tokenize from arguments"
b=$(printf 'Hello world' | "$weft" tokenize --tokenizer "$T" -)
[ "$a" = "$b" ] || fail "arguments ($a) and stdin ($b) differ"

py=${WEFT_PYTHON:-}
if [ -n "$py" ] && "$py" -c "import tokenizers" 2>/dev/null; then
    "$py" - "$T" "$tmp/hf.txt" "${texts[@]}" <<'EOF' || fail "HF tokenizers reference"
import sys
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
with open(sys.argv[2], "w") as f:
    for t in sys.argv[3:]:
        f.write(" ".join(str(i) for i in tok.encode(t, add_special_tokens=True).ids) + "\n")
EOF
    diff "$tmp/hf.txt" "$tmp/weft.txt" > "$tmp/diff" || { cat "$tmp/diff"; fail "ids differ from HF"; }
    # --no-special: the chat marker is text, as HF encodes it with split_special_tokens
    "$weft" tokenize --tokenizer "$T" --no-special "<|im_start|>user" > "$tmp/ns.txt"
    "$py" - "$T" <<'EOF' > "$tmp/hfns.txt" || fail "HF split_special_tokens"
import sys
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
tok.encode_special_tokens = True
print(" ".join(str(i) for i in tok.encode("<|im_start|>user", add_special_tokens=False).ids))
EOF
    diff "$tmp/hfns.txt" "$tmp/ns.txt" > /dev/null ||
        fail "--no-special: $(cat "$tmp/ns.txt") against HF $(cat "$tmp/hfns.txt")"
    echo "ok: ids equal HF tokenizers' for ${#texts[@]} texts and --no-special"
else
    echo "SKIP: HF comparison (no WEFT_PYTHON with tokenizers)"
fi
grep -q "^151644 " <(sed -n 7p "$tmp/weft.txt") || fail "the chat marker is not one special id"

# --decode gives each text back
n=0
while IFS= read -r ids; do
    out=$("$weft" tokenize --tokenizer "$T" --decode "$ids"; printf x) || fail "decode exited"
    out=${out%x}
    [ "${out%$'\n'}" = "${texts[$n]}" ] || fail "decode of text $n: '${out%$'\n'}'"
    n=$((n + 1))
done < "$tmp/weft.txt"
"$weft" tokenize --tokenizer "$T" --decode "9707, 1879" | grep -qx "Hello world" ||
    fail "comma-separated ids"
echo "ok: --decode round trip"

# --pieces: one line a token, control bytes escaped
printf 'a\\b\tc\n' | "$weft" tokenize --tokenizer "$T" --pieces - > "$tmp/pieces"
[ "$(wc -l < "$tmp/pieces")" = "$(printf 'a\\b\tc\n' | "$weft" tokenize --tokenizer "$T" - |
    wc -w)" ] || fail "--pieces: one line a token"
grep -qxF $'43456\t\\\\b' "$tmp/pieces" || { cat "$tmp/pieces"; fail "--pieces: backslash"; }
awk -F'\t' 'NF != 2 { exit 1 }' "$tmp/pieces" || fail "--pieces: a line without exactly one tab"
echo "ok: --pieces"

# --model DIR
mkdir -p "$tmp/m" && cp "$T" "$tmp/m/"
[ "$("$weft" tokenize --model "$tmp/m" Hello world)" = "$a" ] || fail "--model DIR"

# a vocab GGUF against llama.cpp's own vectors (first line of the phi-3 test file)
G=$shared/models/llamacpp-tokenizer-vectors/ggml-vocab-phi-3.gguf
if [ -f "$G" ]; then
    want=$(awk 'NR == 1' "$G.out" | tr -s ' ' | sed 's/^ //')
    text=$(awk 'BEGIN { RS = "\n__ggml_vocab_test__\n" } NR == 1 { printf "%s", $0 }' "$G.inp")
    got=$(printf '%s' "$text" | "$weft" tokenize --tokenizer "$G" --no-special -)
    [ "$got" = "$want" ] || fail "phi-3 GGUF: '$got' against llama.cpp's '$want' for '$text'"
    echo "ok: vocab GGUF"
fi

expect_err() { expect_exit "$1" "$2" "$weft" tokenize "${@:3}"; }
expect_err 2 "--model DIR or --tokenizer FILE is required" hello
expect_err 2 "no TEXT given" --tokenizer "$T"
expect_err 2 "no IDS given" --tokenizer "$T" --decode
expect_err 2 "not two" --tokenizer "$T" --model "$tmp/m" hello
expect_err 2 "does not apply to --decode" --tokenizer "$T" --pieces --decode 1
expect_err 2 "unknown option --frob" --tokenizer "$T" --frob hello
expect_err 2 "--tokenizer needs a value" --tokenizer
expect_err 2 'expected a token id, got "abc"' --tokenizer "$T" --decode abc
expect_err 2 'expected a token id, got "-5"' --tokenizer "$T" --decode -- -5
expect_err 1 "is not in the vocabulary" --tokenizer "$T" --decode 99999999
expect_err 1 "$tmp/none.json" --tokenizer "$tmp/none.json" hello
echo "ok: errors"
echo "tokenize: all passed"
