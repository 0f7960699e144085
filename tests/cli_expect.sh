# Sourced by the CLI tests (tests/abi/test_candidate_cli.sh, test_plugins_cli.sh,
# tests/integration/test_tokenize_cli.sh), which define fail().
# expect_exit STATUS MESSAGE COMMAND...: COMMAND, reading nothing, must exit STATUS and write
# MESSAGE (a fixed string) to stderr; otherwise fail() says what it did instead.
expect_exit() {
    local want=$1 msg=$2 rc text errfile
    shift 2
    errfile=$(mktemp)
    "$@" > /dev/null 2> "$errfile" < /dev/null
    rc=$?
    text=$(cat "$errfile")
    rm -f "$errfile"
    [ "$rc" = "$want" ] || fail "$*: exit $rc, expected $want ($text)"
    grep -qF -- "$msg" <<< "$text" || fail "$*: stderr lacks '$msg': $text"
}
