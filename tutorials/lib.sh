# Shared by the lessons' run.sh (bash): argument check, a temporary working
# directory, commands shown as they run, and claims that count failures.
#
# A lesson's run.sh sources this file, runs its commands through `run`, checks
# what its README claims with `claim` and the helpers below, and ends with
# `finish`, which exits 1 if any claim failed. Nothing is written outside the
# temporary directory, which is removed at exit (TUTORIAL_KEEP=1 keeps it, to
# look at the pictures). Plain bash, awk and grep: no Python or jq.

if [[ $# -lt 1 || -z ${1:-} ]]; then
    echo "usage: $0 PATH/TO/usp   (build it: cmake -S . -B build && cmake --build build --target usp)" >&2
    exit 2
fi
if [[ ! -x $1 || -d $1 ]]; then
    echo "$0: '$1' is not an executable usp binary; build it with cmake --build build --target usp" >&2
    exit 2
fi
USP=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
# shellcheck disable=SC2034 # used by the run.sh that source this file
LESSON_DIR=$(cd "$(dirname "$0")" && pwd) # the lesson's own files (read only)

# The lessons run tiny models, where one thread is as fast as all of them
# (bench/train --threads), and one thread keeps a loaded machine (or ctest -j)
# from the thread-pool contention docs/runtimes.md warns about ("Threads and
# cores"). The numbers do not depend on it: usp gives the same bits on any count.
export OMP_NUM_THREADS=1

START_DIR=$PWD # where run.sh was called from: relative paths in its arguments start here

# abs_path PATH: PATH made absolute from where run.sh was called.
abs_path()
{
    [[ $1 == /* ]] && echo "$1" || echo "$START_DIR/$1"
}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/usp-tutorial.XXXXXX") || exit 1
if [[ ${TUTORIAL_KEEP:-0} == 1 ]]; then
    trap 'echo "outputs kept in $WORK"' EXIT
else
    trap 'rm -rf "$WORK"' EXIT
fi
trap 'exit 130' INT # so that the EXIT trap cleans up after ^C or ctest's timeout too
trap 'exit 143' TERM
cd "$WORK" || exit 1

FAILED=0
CLAIMS=0

# A command that hangs is a failure, not a stuck lesson: exit code 124 after
# TUTORIAL_TIMEOUT seconds (nothing in the lessons takes more than a minute).
limit()
{
    timeout "${TUTORIAL_TIMEOUT:-300}" "$@"
}

# run CMD...: shows the command (usp for the binary's path), runs it; its stdout
# goes to out.txt, its stderr to err.txt, its exit code to $RC. Both are shown.
run()
{
    local shown=("$@")
    [[ ${shown[0]} == "$USP" ]] && shown[0]=usp
    echo "\$ ${shown[*]}"
    limit "$@" >out.txt 2>err.txt
    RC=$?
    sed 's/^/  /' out.txt
    sed 's/^/  /' err.txt
    echo "  (exit code $RC)"
}

# run_hidden CMD...: as run, but stdout (one long JSON line, say) is only kept in out.txt.
run_hidden()
{
    local shown=("$@")
    [[ ${shown[0]} == "$USP" ]] && shown[0]=usp
    echo "\$ ${shown[*]}"
    limit "$@" >out.txt 2>err.txt
    RC=$?
    sed 's/^/  /' err.txt
    echo "  (exit code $RC; output in out.txt)"
}

# claim TEXT CONDITION...: runs the condition (a command); counts and prints the result.
claim()
{
    local text=$1
    shift
    CLAIMS=$((CLAIMS + 1))
    if "$@"; then
        echo "ok      $text"
    else
        echo "FAILED  $text"
        FAILED=$((FAILED + 1))
    fi
}

# json_num FILE KEY: the first number after "KEY": in FILE (compact JSON, one object a line).
json_num()
{
    grep -o "\"$2\":[-0-9.eE+]*" "$1" | head -n 1 | cut -d: -f2
}

# last_line FILE: its last line (the --json summary).
last_line()
{
    tail -n 1 "$1"
}

# first_line FILE
first_line()
{
    head -n 1 "$1"
}

# is_number X: true for a decimal number.
is_number()
{
    [[ $1 =~ ^-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$ ]]
}

# awk_true EXPR: true when the awk expression is non-zero (floating-point comparisons).
awk_true()
{
    awk "BEGIN { exit !($1) }"
}

# rel_close A B TOL: |A - B| <= TOL |B|.
rel_close()
{
    is_number "$1" && is_number "$2" && awk_true "($1 - $2) <= $3 * (($2) < 0 ? -($2) : ($2)) && ($2 - $1) <= $3 * (($2) < 0 ? -($2) : ($2))"
}

# contains FILE TEXT: FILE contains TEXT (fixed string).
contains()
{
    grep -qsF -- "$2" "$1"
}

# matches FILE REGEX: FILE has a line matching the extended regular expression.
matches()
{
    grep -qsE -- "$2" "$1"
}

# section TITLE: a heading in the output.
section()
{
    echo
    echo "== $1"
}

# finish: the verdict; exits 1 when a claim failed.
finish()
{
    echo
    if ((FAILED > 0)); then
        echo "$FAILED of $CLAIMS claims FAILED"
        exit 1
    fi
    echo "all $CLAIMS claims hold"
    exit 0
}
