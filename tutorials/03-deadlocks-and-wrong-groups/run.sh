#!/usr/bin/env bash
# Lesson 3: deadlocks, mismatched collectives and wrong process groups, caught.
# Usage: run.sh PATH/TO/usp. Injects each kind of fault into usp selftest (and one
# into usp train) and checks the exit code (3: deadlock or mismatch, 4: a rank
# failed), the report's wording, its wait chain, and the wait-for picture.
# Exit 1 if a claim fails.
source "$(dirname "$0")/../lib.sh"

# W = 8 = DP 2 x Ulysses 4: groups ulysses[0] = ranks 0-3, ulysses[1] = 4-7, dp[u] = {u, u+4}.
mesh=(--world 8 --ulysses 4)

section "The schedule without faults"
run "$USP" selftest "${mesh[@]}"
claim "usp selftest --world 8 --ulysses 4: exit code 0" test "$RC" = 0

section "group: rank 2 calls its all-to-all on the world instead of its Ulysses group"
run "$USP" selftest "${mesh[@]}" --inject group:rank=2 --dot deadlock.dot
claim "exit code 3 (deadlock)" test "$RC" = 3
claim "the report says deadlock" contains err.txt "deadlock: no rank can run and some are blocked"
# (call sites are file:line; the line numbers move as the code changes, so they are not checked)
site='\(core/train/selftest\.c:[0-9]+\)'
claim "wait chain: rank 0 waits in all_to_all #1 on ulysses[0] for rank 2" \
    matches err.txt "wait chain: rank 0 waits in all_to_all #1 on ulysses\[0\] $site for rank 2"
claim "... rank 2 waits on world for rank 0: a cycle" \
    matches err.txt "rank 2 waits in all_to_all #5 on world $site for rank 0; a cycle"
claim "the report names the injected fault" contains err.txt "rank 2: group at its call 1"
claim "ranks 4-7 wait in their dp all_reduce for ranks 0-3" \
    matches err.txt "rank 4: blocked in all_reduce #1 on dp\[0\] $site all_reduce\(count=2048, f32, sum\), waiting for rank 0"
claim "the wait-for picture is written" contains deadlock.dot "digraph waits"
claim "the picture marks rank 0 and rank 2 as the cycle" \
    eval 'contains deadlock.dot "rank 0 (in the cycle)" && contains deadlock.dot "rank 2 (in the cycle)"'
claim "its red arrows are the cycle 0 -> 2 -> 0" \
    test "$(grep -cE 'r(0 -> r2|2 -> r0) \[color="#cc0000"' deadlock.dot)" = 2

section "group=dp: the all-to-all lands in the data-parallel group (the article's wrong group)"
run "$USP" selftest "${mesh[@]}" --inject group:rank=2,group=dp
claim "exit code 3 (collective mismatch)" test "$RC" = 3
claim "rank 2's all_to_all meets rank 6's gradient all_reduce on dp[2]" \
    eval 'contains err.txt "collective mismatch on dp[2]: different ops" && contains err.txt "rank 6 calls all_reduce(count=2048, f32, sum)"'

section "size: rank 2 sends one element too few"
run "$USP" selftest "${mesh[@]}" --inject size:rank=2
claim "exit code 3, a mismatch of counts: 2047 against 2048" \
    eval 'test "$RC" = 3 && contains err.txt "different counts" && contains err.txt "rank 2 calls all_to_all(count=2047, f32)"'

section "skip: rank 2 skips its first all-to-all (its second is then matched with the others' first)"
run "$USP" selftest "${mesh[@]}" --inject skip:rank=2
claim "exit code 3: rank 2's output all-to-all (1024) meets the others' Q/K/V (2048)" \
    eval 'test "$RC" = 3 && contains err.txt "rank 2 calls all_to_all(count=1024, f32) as its call #1"'

section "skip a barrier: rank 3 finishes while the others wait for it"
run "$USP" selftest "${mesh[@]}" --inject skip:rank=3,op=barrier --dot exited.dot
claim "exit code 3, a deadlock whose chain ends at a rank that exited" \
    eval 'test "$RC" = 3 && contains err.txt "for rank 3; rank 3 exited after 8 calls on world"'
claim "the picture draws rank 3 as the missing participant" contains exited.dot "rank 3: EXITED (others wait for it)"

section "swap: rank 1 issues the loss and token-count all-reduces in reverse order"
run "$USP" selftest "${mesh[@]}" --inject swap:rank=1,op=all_reduce
claim "exit code 3: f64 against i64 at the same position on sp[0]" \
    eval 'test "$RC" = 3 && contains err.txt "collective mismatch on sp[0]: different dtypes"'

section "crash: rank 2 dies at its first all-to-all"
run "$USP" selftest "${mesh[@]}" --inject crash:rank=2 --dot crash.dot
claim "exit code 4 (a rank failed)" test "$RC" = 4
claim "the chain ends at the crashed rank" \
    matches err.txt "rank 0 waits in all_to_all #1 on ulysses\[0\] $site for rank 2; rank 2 crashed \(injected\)"
claim "the picture draws rank 2 as crashed" contains crash.dot "rank 2: CRASHED (others wait for it)"

section "The same in real training"
run "$USP" train --steps 1 --eval-samples 0 --inject group:rank=2
claim "usp train --inject group:rank=2: exit code 3 and a cycle in the trainer's own calls" \
    eval 'test "$RC" = 3 && contains err.txt "core/train/train.c" && contains err.txt "a cycle"'

section "A fault that cannot be injected is a usage error"
run "$USP" selftest "${mesh[@]}" --inject crash:rank=9
claim "--inject crash:rank=9 on 8 ranks: exit code 2, naming the ranks there are" \
    eval 'test "$RC" = 2 && contains err.txt "there are only 8 ranks (0 to 7)"'

finish
