# Shared by the command-line tests (cli_test.sh, cli_inputs_test.sh), sourced with the usp
# binary's path: sets `usp`, a scratch directory `work` (removed on exit), the pass / fail
# counters, the short runs `short` and `one`, and `expect` and `check`.
usp=$1
unset COLUMNS # help wraps to it (tools/cli.c); the tests grep whole lines
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0
# short training runs: two steps, and one
short=(train --steps 2 --seq 64 --batch 2 --eval-samples 0)
one=(train --steps 1 --seq 64 --batch 2 --eval-samples 0)

# expect CODE NEEDLE -- ARGS...: runs usp ARGS (60 s at most, or $limit), checks
# the exit code and that NEEDLE appears in its output (stdout + stderr).
expect() {
    local code=$1 needle=$2
    shift 3
    local out rc
    out=$(timeout "${limit:-60}" "$usp" "$@" 2>&1)
    rc=$?
    if [[ $rc -eq $code && $out == *"$needle"* ]]; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAIL: usp $* -> exit $rc (expected $code), looked for '$needle' in:"
        echo "$out" | head -20 | sed 's/^/    /'
    fi
}

check() { # check DESCRIPTION CONDITION...: counts a check that passes when the condition does
    local what=$1
    shift
    if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: $what"; fi
}

# the end of a script: its counts, and its exit status
finish() {
    echo "$1: $passed passed, $failed failed"
    [[ $failed -eq 0 ]]
}
