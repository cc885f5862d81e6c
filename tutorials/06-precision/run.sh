#!/usr/bin/env bash
# Lesson 6: precision. Ulysses is bitwise one GPU; Ring and the hybrid differ in the
# last bits. Usage: run.sh PATH/TO/usp [PATH/TO/tutorial_precision]. Checks that the
# first training loss (and the loss after 20 steps) of Ulysses, Ring and the hybrid
# equal one rank's within 1e-5 relative; with the precision program (built by
# `cmake --build build --target tutorial_precision`), runs it: it compares one
# attention layer bit for bit and checks its own claims. Exit 1 if a claim fails.
source "$(dirname "$0")/../lib.sh"

PRECISION=${2:+$(abs_path "$2")}
if [[ -n $PRECISION && ( ! -x $PRECISION || -d $PRECISION ) ]]; then
    echo "$0: '$PRECISION' is not the tutorial_precision program; build it with" \
         "cmake --build build --target tutorial_precision" >&2
    exit 2
fi

section "The first loss: one rank against Ulysses, Ring and the hybrid"
run "$USP" train --world 1 --steps 1 --eval-samples 0 --json
ref=$(json_num out.txt loss)
claim "one rank: first loss $ref" is_number "$ref"
for mesh in "--ulysses 4" "--ring 4" "--ulysses 2 --ring 2"; do
    run "$USP" train --world 4 $mesh --steps 1 --eval-samples 0 --json
    loss=$(json_num out.txt loss)
    claim "4 ranks ($mesh): first loss $loss = $ref within 1e-5" rel_close "$loss" "$ref" 1e-5
done

section "After 20 steps: every update used gradients summed in another order"
run "$USP" train --world 1 --steps 20 --log-every 20 --eval-samples 0 --json
ref=$(json_num <(grep '"step":20,' out.txt) loss)
claim "one rank: loss at step 20 $ref" is_number "$ref"
for mesh in "--ulysses 4" "--ring 4" "--ulysses 2 --ring 2"; do
    run "$USP" train --world 4 $mesh --steps 20 --log-every 20 --eval-samples 0 --json
    loss=$(json_num <(grep '"step":20,' out.txt) loss)
    claim "4 ranks ($mesh): loss at step 20 $loss = $ref within 1e-5" rel_close "$loss" "$ref" 1e-5
done

section "bf16: Ulysses still bitwise, Ring one bf16 rounding away"
run "$USP" train --world 1 --steps 1 --eval-samples 0 --json --dtype bf16
ref=$(json_num out.txt loss)
run "$USP" train --world 4 --ulysses 4 --steps 1 --eval-samples 0 --json --dtype bf16
loss=$(json_num out.txt loss)
claim "bf16, Ulysses U=4: first loss $loss is one rank's $ref, bit for bit" test "$loss" = "$ref"
run "$USP" train --world 4 --ring 4 --steps 1 --eval-samples 0 --json --dtype bf16
loss=$(json_num out.txt loss)
claim "bf16, Ring R=4: first loss $loss = $ref within 1e-4 (bf16's tolerance)" rel_close "$loss" "$ref" 1e-4

section "One attention layer, bit for bit"
if [[ -n $PRECISION ]]; then
    program=$(basename "$PRECISION")
    echo "\$ $program"
    limit "$PRECISION" >out.txt 2>err.txt
    RC=$?
    sed 's/^/  /' out.txt err.txt
    echo "  (exit code $RC)"
    claim "$program: all its claims hold (exit code 0)" test "$RC" = 0
    claim "Ulysses U=4: o is bitwise one rank's" matches out.txt '^Ulysses U=4 +o +[0-9]+ +0 .*bitwise$'
    claim "Ring R=4: o differs in some elements" matches out.txt '^Ring R=4 +o +[0-9]+ +[1-9][0-9]* '
else
    echo "(skipped: pass the tutorial_precision program as the second argument)"
fi

finish
