#!/usr/bin/env bash
# Lesson 9: a real hang on real processes.
# Usage: run.sh PATH/TO/usp. One planted fault (rank 2 skips its loss all-reduce): the simulator reports the
# cycle at once; four MPI processes hang until the watchdog ends them (exit 3) with every rank's flight
# record; usp postmortem prints the simulator's wait chain from them; --check-collectives reports the
# mismatch without waiting; a stalled call reads as queued. Needs mpirun. Exit 1 if a claim fails.
source "$(dirname "$0")/../lib.sh"

if [[ $(id -u) == 0 ]]; then # Open MPI's own consent to run as root (usp never gives it)
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_btl_vader_single_copy_mechanism=none # no cross-memory attach in containers
fault=(--world 4 --steps 2 --inject skip:rank=2)
chain='wait chain: rank 0 waits in all_reduce #5 on world \(core/train/train\.c:[0-9]+\) for rank 2; rank 2 waits in all_to_all #1 on ulysses\[0\] \(core/parallel/ulysses\.c:[0-9]+\) for rank 0; a cycle'

section "The simulator"
run "$USP" train "${fault[@]}"
claim "exit code 3" test "$RC" = 3
claim "the cycle between rank 0 and rank 2" matches err.txt "$chain"

section "Four MPI processes"
start=$SECONDS
run "$USP" train --backend mpi "${fault[@]}" --timeout 5 --dump-dir dumps
took=$((SECONDS - start))
claim "exit code 3 (a hang the watchdog ended)" test "$RC" = 3
claim "ended within the timeout and the 8 s bound plus start-up ($took s <= 25 s)" test "$took" -le 25
claim "every rank wrote its flight record" test "$(ls dumps/rank-*.usp-flight.json | wc -l)" = 4
claim "a watchdog named the hang, inside its call" \
    matches err.txt "rank [0-3]: watchdog: .* not complete after .* \(--timeout 5\): a hang; it is inside the call"

section "usp postmortem"
run "$USP" postmortem dumps
claim "exit code 3 (deadlock)" test "$RC" = 3
claim "the simulator's wait chain, from the records" matches out.txt "$chain"
claim "all four records read" contains out.txt "flight records of 4 of 4 ranks in dumps"

section "--check-collectives"
start=$SECONDS
run "$USP" train --backend mpi "${fault[@]}" --check-collectives
claim "exit code 3 (mismatch), without waiting for a timeout ($((SECONDS - start)) s)" test "$RC" = 3
claim "rank 0 names the two calls" contains err.txt "collective mismatch on world: their next calls together are on different groups"

section "A stalled call reads as queued"
run "$USP" train --backend mpi --world 4 --steps 2 --inject stall:rank=1,op=all_to_all --timeout 3 --dump-dir stall
claim "exit code 3" test "$RC" = 3
run "$USP" postmortem stall
claim "the postmortem: rank 1 never started it" contains out.txt "but rank 1 never started it"
claim "rank 1's call is queued" matches out.txt "rank 1: all_to_all #1 on ulysses\[0\]: queued"

finish
