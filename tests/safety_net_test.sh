#!/usr/bin/env bash
# The safety net on the CPU (issue 26, acceptance 4), in real processes under
# mpirun and under usp's own launch: a call that never completes (--inject
# stall), an abort that never returns (abort-hang on every rank, so that no
# launcher kill ends it first) and a rank that dies while the world
# communicator is made (init-crash). Each run ends within --timeout plus the
# watchdog's end bound (MPI_WATCHDOG_END_BOUND_S, 8 s; plus the start of 4
# processes on a loaded 2-core machine, given 15 s), every rank leaves a flight
# record, `usp postmortem` names the culprit, and no process of the run is left
# (pgrep on the run's own dump directory, which every process has on its
# command line). Usage: safety_net_test.sh PATH/TO/usp
set -u
source "$(dirname "$0")/script_lib.sh" "$1"
timeout_s=3
bound_s=$((timeout_s + 8 + 15))

# run NAME WANT_RC LAUNCH... -- ARGS...: one run into dumps-NAME; sets out, rc, took, report, prc, left.
run() {
    local name=$1 want=$2
    shift 2
    local launch=()
    while [[ $1 != -- ]]; do launch+=("$1"); shift; done
    shift
    dir="$work/dumps-$name"
    local start=$SECONDS
    out=$(timeout 60 "${launch[@]}" "$usp" train --backend mpi --ulysses 2 --ring 2 --steps 3 --timeout $timeout_s \
        --dump-dir "$dir" "$@" 2>&1)
    rc=$?
    took=$((SECONDS - start))
    left=$(pgrep -f -- "--dump-dir $dir" | tr '\n' ' ')
    records=$(ls "$dir"/rank-*.usp-flight.json 2>/dev/null | wc -l)
    report=$(timeout 30 "$usp" postmortem "$dir" 2>&1)
    prc=$?
    if [[ $rc -ne $want || $took -gt $bound_s || $records -ne 4 || -n $left ]]; then
        fail "$name: exit $rc (expected $want) after $took s (bound $bound_s), $records of 4 records, left: ${left:-none}" \
            "$out
$report"
        return 1
    fi
    echo "$name: exit $rc after $took s (bound $bound_s), $records of 4 records, no process left"
}

mpi=(mpirun --oversubscribe -np 4)

# --- a call that never completes: rank 1's all_reduce waits forever before MPI (posted, never started) ---
for launch in mpirun self; do
    if [[ $launch == mpirun ]]; then l=("${mpi[@]}"); else l=(env); fi
    extra=()
    [[ $launch == self ]] && extra=(--world 4)
    if run "stall-$launch" 3 "${l[@]}" -- "${extra[@]}" --inject stall:rank=1,op=all_reduce; then
        [[ $prc -eq 3 && $report == *"a call that never completes: all_reduce #"*" but rank 1 never started it"* &&
            $report == *"  rank 1: all_reduce #"*": queued (posted at"* &&
            $report == *"  rank 0: all_reduce #"*": inside it (posted at"* &&
            ($launch == mpirun || $out == "usp: launching 4 processes: "*) ]] && ok ||
            fail "stall ($launch): postmortem exit $prc does not name rank 1" "$report"
    fi
done

# --- an abort that never returns, on every rank: the end timer ends each process (exit 3) ---
if run abort-hang 3 "${mpi[@]}" -- --inject stall:rank=1,op=all_reduce --inject abort-hang:rank=0 \
    --inject abort-hang:rank=1 --inject abort-hang:rank=2 --inject abort-hang:rank=3; then
    [[ $prc -eq 3 && $report == *"but rank 1 never started it"* &&
        $out == *"--inject abort-hang: its abort never returns"* &&
        $out == *"the dump and abort did not finish within 8 s; the process ends now (exit 3)"* ]] && ok ||
        fail "abort-hang: postmortem exit $prc, or the end timer did not say it ended the process" "$out
$report"
fi

# --- a rank that dies while the world communicator is made: the others, inside it, are told at once ---
if run init-crash 4 "${mpi[@]}" -- --inject init-crash:rank=2; then
    [[ $prc -eq 4 && $report == *"ranks wait for a rank that crashed"* &&
        $report == *"rank 2: crashed (injected) at its call 0: split #1 on init (runtimes/mpi/mpi_comm.c:"* &&
        $report == *"rank 0: blocked in split #1 on init"*"waiting for rank 2"* &&
        $out == *"usp: rank 0: rank 2 ended the run (usp-abort): crashed (injected: init-crash)"* ]] && ok ||
        fail "init-crash: postmortem exit $prc does not name rank 2" "$out
$report"
fi

# --- the faults refused where they cannot apply, and one that never fired ---
out=$(timeout 60 "${mpi[@]}" "$usp" train --backend mpi --ulysses 2 --ring 2 --steps 1 --inject abort-hang:rank=1,call=2 2>&1)
rc=$?
[[ $rc -eq 2 && $out == *"--inject abort-hang:rank=1,call=2: op= and call= apply to stall only"* ]] && ok ||
    fail "abort-hang with call=: exit $rc" "$out"
out=$(timeout 60 "${mpi[@]}" "$usp" train --backend mpi --ulysses 2 --ring 2 --steps 1 \
    --inject stall:rank=1,op=all_reduce,call=100000 2>&1)
rc=$?
[[ $rc -eq 2 && $out == *"--inject stall:rank=1,op=all_reduce,call=100000 never fired"* ]] && ok ||
    fail "a stall that never fires: exit $rc" "$out"

echo "safety net tests: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
