#!/usr/bin/env bash
# Lesson 8: a hang that only happens on the cluster.
# Usage: run.sh PATH/TO/usp. The planted order bug of `usp selftest --overlap unordered` passes the plain
# simulator and is found by --explore (exit 3) and by its lint; the report names both groups, both ranks and
# both call sites; the fix (--overlap ordered) passes; two kernels at once (--gpu-slots 2) do not hang it but
# the lint still flags it; the training step explores clean. Exit 1 if a claim fails.
source "$(dirname "$0")/../lib.sh"

mesh=(--world 8 --ulysses 4)
site='\(core/train/selftest\.c:[0-9]+\)'

section "The plain simulator passes the overlap with no event"
run "$USP" selftest "${mesh[@]}" --overlap unordered
claim "exit code 0" test "$RC" = 0
claim "every element checked arrived as sent" contains out.txt "every one as sent"

section "--explore: the GPUs' orders"
run "$USP" selftest "${mesh[@]}" --overlap unordered --explore --dot hang.dot
claim "exit code 3 (deadlock)" test "$RC" = 3
claim "the search ran in under 10 s" \
    eval 'awk_true "$(sed -nE "s/.* choices, ([0-9.]+) s .*/\1/p" out.txt) < 10"'
claim "the report: a deadlock in an order the GPUs may run" contains err.txt "deadlock in an order the GPUs may run"
claim "its wait chain ends in a cycle" matches err.txt "^wait chain: .*; a cycle$"
claim "one GPU started the bucket all-reduce on world first" \
    matches err.txt "^  rank [0-9]'s GPU started all_reduce #5 on world $site \[stream 1\] before all_to_all #[0-9] on ulysses\[[01]\]"
claim "another started the all-to-all on its Ulysses group first" \
    matches err.txt "^  rank [0-9]'s GPU started all_to_all #[0-9] on ulysses\[[01]\] $site \[stream 0\] before all_reduce #5 on world"
claim "the lint flags the pair on every rank, with no search" \
    contains err.txt "lint: 16 pairs of calls on different groups may be in flight at once on one GPU (on 8 ranks)"
claim "the wait-for picture is written" contains hang.dot "digraph waits"

section "The fix: the compute stream waits for each bucket"
run "$USP" selftest "${mesh[@]}" --overlap ordered --explore
claim "exit code 0" test "$RC" = 0
claim "every order explored, no GPU ever had a choice" \
    matches out.txt "explored every order .*: 1 to their end, 1 states, 0 choices"
claim "the lint finds nothing" contains out.txt "lint: no two calls of different groups can be in flight at once"
t_ordered=$(sed -nE 's/^  virtual time: +([0-9.]+) s.*/\1/p' out.txt)
run "$USP" selftest "${mesh[@]}" --overlap unordered
t_unordered=$(sed -nE 's/^  virtual time: +([0-9.]+) s.*/\1/p' out.txt)
claim "the order costs a little modelled time (ordered $t_ordered s >= unordered $t_unordered s)" \
    eval 'awk_true "$t_ordered >= $t_unordered"'

section "Two kernels at once"
run "$USP" selftest "${mesh[@]}" --overlap unordered --explore --gpu-slots 2
claim "with K = 2 no order hangs: every order explored" contains out.txt "explored every order"
claim "the lint still flags the pair (exit 3)" eval 'test "$RC" = 3 && contains err.txt "lint: 16 pairs"'

section "A training step"
run "$USP" train --world 8 --ulysses 4 --explore --eval-samples 0
claim "exit code 0" test "$RC" = 0
claim "every order explored" contains out.txt "usp train: explored every order"
claim "the lint finds nothing" contains out.txt "usp train: lint: no two calls"

finish
