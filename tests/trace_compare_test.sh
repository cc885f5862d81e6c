#!/usr/bin/env bash
# Measured traces and usp plan --compare: a 2-process run under mpirun writes
# one Chrome trace with a track per rank and measured durations, which usp plan
# --compare reads (exit 0, the table); a trace of the simulator compares to the
# plan with ratios of 1 (the same cost model on the same code: only the
# rounding of the file's microseconds differs); bad files exit 2 naming the
# file. Usage: trace_compare_test.sh PATH/TO/usp
set -u
usp=$(realpath "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
passed=0 failed=0
unset OMP_NUM_THREADS
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none # no CMA inside containers (ptrace is refused)

ok() { passed=$((passed + 1)); }
fail() {
    failed=$((failed + 1))
    echo "FAIL: $1"
    [[ -n ${2:-} ]] && echo "$2" | head -40 | sed 's/^/    /'
}
# expect CODE NEEDLE -- ARGS...: usp ARGS exits CODE and says NEEDLE.
expect() {
    local code=$1 needle=$2
    shift 3
    local out rc
    out=$(timeout 120 "$usp" "$@" 2>&1)
    rc=$?
    if [[ $rc -eq $code && $out == *"$needle"* ]]; then ok; else fail "usp $* -> exit $rc (expected $code, '$needle')" "$out"; fi
}
small=(--steps 2 --seq 64 --batch 2 --log-every 1)

# --- measured: 2 processes, one file --------------------------------------------------
if command -v mpirun >/dev/null; then
    out=$(timeout 120 mpirun --oversubscribe -np 2 "$usp" train --backend mpi --world 2 "${small[@]}" --trace t.json 2>&1)
    rc=$?
    [[ $rc -eq 0 && $out == *"trace in t.json"* ]] && ok || fail "mpirun -np 2 usp train --backend mpi --trace: exit $rc" "$out"
    got=$(python3 -c "
import json, collections
d = json.load(open('t.json'))
run = d['otherData']['usp_run']
open_ = {}
dur = collections.defaultdict(float)
for e in d['traceEvents']:
    if e['ph'] == 'B': open_.setdefault((e['pid'], e['tid']), []).append(e['ts'])
    elif e['ph'] == 'E': dur[(e['pid'], e['tid'])] += e['ts'] - open_[(e['pid'], e['tid'])].pop()
ranks = sorted({p for p, t in dur})
bad = [k for k in [(r, t) for r in (0, 1) for t in (0, 1, 2)] if dur[k] <= 0]
print('ok' if ranks == [0, 1] and not bad and run['backend'] == 'mpi' and run['world'] == 2
      else 'ranks %s, tracks without time %s, run %s' % (ranks, bad, run))
" 2>&1)
    [[ $got == ok ]] && ok || fail "the mpi trace: one track per rank with time on compute, calls and steps" "$got"
    expect 0 "measured: step 2 of 2 on this machine (MPI) (measured), mean of 2 ranks" -- plan --compare t.json
    out=$("$usp" plan --compare t.json 2>&1)
    for row in attention gemm all_to_all all_reduce compute communication step; do
        [[ $out == *"  $row "* ]] && ok || fail "plan --compare of the mpi trace has no $row row" "$out"
    done
    got=$("$usp" plan --compare t.json --json | python3 -c "
import json, sys
d = json.load(sys.stdin)
p = {x['phase']: x for x in d['phases']}
print('ok' if d['backend'] == 'mpi' and d['step'] == 2 and p['step']['measured_s'] > 0 and p['step']['ratio'] > 0
      else d)" 2>&1)
    [[ $got == ok ]] && ok || fail "plan --compare --json of the mpi trace" "$got"
    expect 2 "--dot with --backend mpi: pictures are the simulator's" -- train --backend mpi --world 1 --dot x.dot
else
    echo "SKIP: no mpirun"
fi

# --- the simulator against the plan: ratios of 1 ---------------------------------------
# |ratio - 1| < 1e-6 for the step, compute and communication (Ulysses, then ring and DP)
sim_ratios() {
    "$usp" plan --compare "$1" --json | python3 -c "
import json, sys
d = json.load(sys.stdin)
bad = [(x['phase'], x['ratio']) for x in d['phases']
       if x['phase'] in ('step', 'compute', 'communication') + tuple(sys.argv[1:]) and abs(x['ratio'] - 1) >= 1e-6]
print('ok' if not bad else bad)" "${@:2}" 2>&1
}
for mesh in "--world 2" "--world 4 --ulysses 1 --ring 2"; do
    out=$(timeout 120 "$usp" train $mesh "${small[@]}" --trace s.json 2>&1)
    got=$(sim_ratios s.json gemm attention)
    [[ $got == ok ]] && ok || fail "sim $mesh against its plan: ratios not 1" "$got
$out"
done
got=$(sim_ratios s.json ring_p2p all_reduce)
[[ $got == ok ]] && ok || fail "sim ring x dp against its plan: ring and all-reduce ratios not 1" "$got"
expect 2 "--world 8 beside --compare s.json: the run was --world 4" -- plan --compare s.json --world 8

# --- bad files: exit 2 naming the file ---------------------------------------------------
head -c 2000 s.json >cut.json
expect 2 "cut.json: not JSON at line" -- plan --compare cut.json
expect 2 "(the file is truncated" -- plan --compare cut.json
echo '{"traceEvents": []}' >other.json
expect 2 "other.json: a Chrome trace, but not one usp wrote" -- plan --compare other.json
echo 'hello' >text.json
expect 2 "text.json: not JSON" -- plan --compare text.json
"$usp" plan --trace plan.json >/dev/null 2>&1
expect 2 "plan.json: a usp trace without the run's options" -- plan --compare plan.json
expect 2 "missing.json: cannot read it" -- plan --compare missing.json

echo "trace_compare_test: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
