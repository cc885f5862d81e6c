#!/usr/bin/env bash
# --explore (docs/explore.md): the planted order bug of `usp selftest --overlap unordered` passes the plain
# simulator and is found by the exploration and by the lint, exit 3, naming both groups and both call sites;
# its fix (--overlap ordered) and every mesh the training tests run (U, R, U x R, DP x U, ZeRO 0-3, with the
# gradient buckets one layer each) pass with K = 1; bad options are exit 2 naming the option.
# Usage: explore_test.sh PATH/TO/usp
set -u
source "$(dirname "$0")/cli_lib.sh" "$1"

# the planted bug: the plain simulator passes it, the exploration does not
expect 0 "ok" -- selftest --world 8 --ulysses 4 --overlap unordered
expect 3 "deadlock in an order the GPUs may run" -- selftest --world 8 --ulysses 4 --overlap unordered --explore
out=$("$usp" selftest --world 8 --ulysses 4 --overlap unordered --explore 2>&1)
for needle in "the orders that conflict" "on world (core/train/selftest.c:" "on ulysses[" "a cycle" \
    "lint: 16 pairs of calls on different groups" "ranks 0-7: all_reduce"; do
    check "the report says '$needle'" grep -qF "$needle" <<<"$out"
done
# rank ids of both sides of the conflict
check "the conflict names two ranks' GPUs" test "$(grep -c "^  rank [0-9]*'s GPU started" <<<"$out")" = 2
expect 3 "wait-for picture of the explored deadlock in $work/hang.dot" -- selftest --world 8 --ulysses 4 \
    --overlap unordered --explore --dot "$work/hang.dot"
check "the picture is a DOT graph" grep -q "digraph" "$work/hang.dot"
# two kernels at once: this bug no longer hangs, the lint still flags it
expect 3 "explored every order" -- selftest --world 8 --ulysses 4 --overlap unordered --explore --gpu-slots 2

# the fix, and no overlap at all
for overlap in ordered none; do
    expect 0 "lint: no two calls of different groups can be in flight at once" -- selftest --world 8 --ulysses 4 \
        --overlap $overlap --explore
done

# the training step on every mesh of the tests, with each ZeRO stage
for mesh in "--world 4" "--world 4 --ring 4" "--world 4 --ring 2" "--world 4 --ulysses 2" \
    "--world 8 --ulysses 2 --ring 2"; do
    for zero in 0 1 2 3; do
        expect 0 "usp train: explored every order" -- train $mesh --zero $zero --explore --seq 64 --batch 4 \
            --eval-samples 0
    done
done
# the gradient buckets at one layer each, overlapped with the backward's exchanges (issue 26's overlap)
for mesh in "--world 4 --ulysses 2" "--world 8 --ulysses 2 --ring 2"; do
    for zero in 0 3; do
        expect 0 "usp train: lint: no two calls" -- train $mesh --zero $zero --bucket-mb 0.001 --micro-batches 2 \
            --explore --seq 64 --batch 4 --eval-samples 0
    done
done
expect 0 "usp train: lint: no two calls" -- train --world 4 --ring 2 --recompute --tiled-mlp --micro-batches 2 \
    --explore --steps 2 --seq 64 --batch 4 --eval-samples 0

# bad options: exit 2, naming the option
expect 2 "--gpu-slots 2 without --explore" -- selftest --gpu-slots 2
expect 2 "--gpu-slots" -- train --explore --gpu-slots 0
expect 2 "--explore with --backend mpi" -- train --explore --backend mpi
expect 2 "--overlap sideways: not a mode" -- selftest --overlap sideways
finish explore_test
