#!/usr/bin/env bash
# The calibration loop of issue 28 on this machine, figures printed, never asserted:
#   bench/calibrate_loop.sh [BUILD_DIR] [WORLDS] [REPEATS]   (default build/release, "2 4", 1; needs mpirun)
# For each world W and each of REPEATS rounds: usp calibrate --backend mpi (the full sweep) into cal-W.json,
# then three runs traced (tiny at 1024 and 8192 tokens, gpt2-124m at 1024; Ulysses over the W processes), each
# compared with usp plan --compare --topology cal-W.json --compare-steps 5 (each figure the median of steps 2-6:
# one step's figures move by tens of percent on a shared machine). One line a run: the step's ratio (measured /
# predicted), each compute phase's, and each collective's transfer (its time less the wait for the last peer)
# and wait; then the four ops (plan --compare-ops) whose measured time is furthest from the predicted. With
# REPEATS > 1 a last table gives each ratio's median over the rounds and its range: a round calibrates again, so
# the range is what a user of this machine sees from one calibration and one run.
# The goal (issue 28): step within 15%, compute phases and transfers within 25%.
set -u
build=${1:-build/release}
worlds=${2:-2 4}
repeats=${3:-1}
usp=$(realpath "$build/tools/usp")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); CPU vector width: $(
    if grep -qw avx512f /proc/cpuinfo; then echo "AVX-512 (512-bit)"; elif grep -qw avx2 /proc/cpuinfo; then
        echo "AVX2 (256-bit)"; else echo "SSE2 (128-bit)"; fi)"
for W in $worlds; do
    for round in $(seq "$repeats"); do
        start=$SECONDS
        mpirun --oversubscribe -np "$W" "$usp" calibrate --backend mpi --out "cal-$W.json" >"cal-$W.txt" 2>&1 ||
            { tail -5 "cal-$W.txt"; exit 1; }
        echo "W=$W round $round: calibrated in $((SECONDS - start)) s (load $(cut -d' ' -f1 /proc/loadavg))"
        for run in "tiny 1024" "tiny 8192" "gpt2-124m 1024"; do
            set -- $run
            mpirun --oversubscribe -np "$W" "$usp" train --backend mpi --model "$1" --seq "$2" --batch 1 --steps 6 \
                --eval-samples 0 --trace "run.json" >run.txt 2>&1 || { tail -5 run.txt; exit 1; }
            "$usp" plan --compare run.json --topology "cal-$W.json" --compare-steps 5 --compare-ops --json |
                python3 -c "
import json, sys
j = json.loads(sys.stdin.read())
rows = {p['phase']: p for p in j['phases']}
def r(a, b):
    return a / b if b > 0 else float('nan')
step = rows['step']
figs = [('step', r(step['measured_s'], step['predicted_s']))]
figs += [(k, r(rows[k]['measured_s'], rows[k]['predicted_s'])) for k in ('attention', 'gemm', 'other_compute')]
out = ['step %.2f (%.1f ms measured)' % (figs[0][1], 1e3 * step['measured_s'])]
out += ['%s %.2f' % f for f in figs[1:]]
for k in ('all_to_all', 'all_reduce'):
    p = rows[k]
    pt, mt = p['predicted_s'] - p['predicted_wait_s'], p['measured_s'] - p['measured_wait_s']
    figs.append((k + ' transfer', r(mt, pt)))
    out.append('%s transfer %.2f (%.0f / %.0f us), wait %.0f us' % (k, r(mt, pt), 1e6 * mt, 1e6 * pt,
                                                                  1e6 * p['measured_wait_s']))
print('  W=%s %s %s: ' % ('$W', '$1', '$2') + ', '.join(out))
ops = sorted(j['ops'], key=lambda o: -abs(o['measured_s'] - o['predicted_s']))[:4]
print('    most off, op by op: ' + ', '.join('%s %+.0f us (%s)' % (o['op'], 1e6 * (o['measured_s'] - o['predicted_s']),
      '%.2f' % o['ratio'] if o['ratio'] is not None else 'none') for o in ops))
with open('ratios.tsv', 'a') as f:
    for name, v in figs:
        f.write('W=%s %s %s\t%s\t%r\n' % ('$W', '$1', '$2', name, v))
"
        done
    done
done
[ "$repeats" -gt 1 ] && python3 -c "
import collections, statistics
runs = collections.OrderedDict()
for line in open('ratios.tsv'):
    run, name, v = line.rstrip('\n').split('\t')
    runs.setdefault(run, collections.OrderedDict()).setdefault(name, []).append(float(v))
print('over $repeats rounds, measured / predicted: median [lowest, highest]')
for run, figs in runs.items():
    print('  %s: ' % run + ', '.join('%s %.2f [%.2f, %.2f]' % (k, statistics.median(v), min(v), max(v))
                                     for k, v in figs.items()))
"
exit 0
