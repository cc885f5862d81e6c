#!/usr/bin/env bash
# Lesson 2: sequence lengths that do not divide, and --pad.
# Usage: run.sh PATH/TO/usp. Checks that a length that does not divide is refused
# (exit 2) with a message naming N, the nearest lengths that work and --pad, and
# that a padded run gives the loss of the unpadded single-rank run (within 1e-5
# relative) on Ulysses, Ring and the hybrid. Exit 1 if a claim fails.
source "$(dirname "$0")/../lib.sh"

section "A length that does not divide is refused, with what would work"
run "$USP" train --seq 62 --steps 1
claim "--seq 62 on U=4: exit code 2 (configuration error)" test "$RC" = 2
claim "the message names the length" contains err.txt "--seq 62 does not divide for --ulysses 4 x --ring 1"
claim "the message says N must be a multiple of 4" contains err.txt "N must be a multiple of 4"
claim "the message gives the nearest lengths that work: 60 and 64" contains err.txt "nearest lengths that work are 60 and 64"
claim "the message offers --pad" contains err.txt "pass --pad to pad the sequence to 64"

run "$USP" train --seq 60 --ring 4 --steps 1
claim "--seq 60 on R=4 (causal zigzag: 2R chunks): exit code 2" test "$RC" = 2
claim "zigzag needs a multiple of 2R = 8: nearest 56 and 64" contains err.txt "nearest lengths that work are 56 and 64"

run "$USP" train --world 8 --ulysses 8 --steps 1
claim "more Ulysses ranks than heads (8 > the tiny model's 4): exit code 2" test "$RC" = 2
claim "the message says why and what would work" contains err.txt "use --ulysses <= 4 or add --ring"

section "Heads need not divide: 4 heads on 3 ranks are split 2, 1, 1"
run "$USP" train --world 3 --ulysses 3 --seq 63 --steps 1 --eval-samples 0 --json
claim "--world 3 --ulysses 3 --seq 63 trains (exit 0)" test "$RC" = 0

section "--pad gives the loss of the unpadded single-rank run"
run "$USP" train --world 1 --seq 62 --steps 1 --eval-samples 0 --json
ref=$(json_num out.txt loss)
claim "one rank, 62 tokens, no padding: first loss $ref" is_number "$ref"
# The comparison has the resolution to see two tokens more or less in the loss.
run "$USP" train --world 1 --seq 64 --steps 1 --eval-samples 0 --json
loss64=$(json_num out.txt loss)
claim "two more tokens move the loss by far more than 1e-5 (64 real tokens: $loss64)" \
    eval '! rel_close "$loss64" "$ref" 1e-5'
for mesh in "--ulysses 4" "--ring 4" "--ulysses 2 --ring 2"; do
    run "$USP" train --world 4 $mesh --seq 62 --pad --steps 1 --eval-samples 0 --json
    loss=$(json_num out.txt loss)
    claim "4 ranks ($mesh), padded to 64: first loss $loss = $ref within 1e-5" rel_close "$loss" "$ref" 1e-5
done

finish
