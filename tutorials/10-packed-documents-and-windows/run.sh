#!/usr/bin/env bash
# Lesson 10: packed documents and sliding windows. A text file whose lines are documents (--eot 10, the
# newline) trains on one GPU and on three meshes of four with the same losses; the mask matters (without
# it the losses differ); a sliding window likewise; usp plan shows the ring's traffic shrink to the blocks
# a window reaches, and the work a packing leaves uneven on the ring but not on Ulysses.
# Usage: run.sh PATH/TO/usp. Exit 1 if a claim fails.
source "$(dirname "$0")/../lib.sh"

# docs.txt: 400 lines of 1 to 120 letters (a fixed linear congruential generator: the same file
# everywhere), each line a document ended by its newline.
awk 'BEGIN { s = 7; for (l = 0; l < 400; l++) { s = (s * 1103515245 + 12345) % 2147483648; n = 1 + s % 120;
             line = ""; for (i = 0; i < n; i++) { s = (s * 1103515245 + 12345) % 2147483648;
             line = line sprintf("%c", 97 + s % 26) } print line } }' >docs.txt

# losses FILE: the step losses of a --json run, one a line.
losses()
{
    grep -o '"step":[0-9]*,"loss":[-0-9.eE+]*' "$1" | cut -d: -f3
}

# same_losses A B: every step's loss of A within 1e-6 relative of B's (and as many steps).
same_losses()
{
    [[ $(wc -l <"$1") -eq $(wc -l <"$2") && $(wc -l <"$1") -gt 0 ]] &&
        paste "$1" "$2" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-6 * $2) exit 1 }'
}

common=(--data text:docs.txt --seq 256 --batch 4 --steps 20 --log-every 1 --eval-samples 0 --json)

section "Packed documents: one GPU and three meshes of four"
run_hidden "$USP" train "${common[@]}" --eot 10 --world 1
claim "one GPU trains (exit 0)" test "$RC" = 0
losses out.txt >one.txt
for mesh in "--ulysses 4" "--ring 4 --ulysses 1" "--ulysses 2 --ring 2"; do
    # shellcheck disable=SC2086 # the mesh's two words
    run_hidden "$USP" train "${common[@]}" --eot 10 --world 4 $mesh
    losses out.txt >mesh.txt
    claim "$mesh: the 20 losses of one GPU, each within 1e-6" same_losses mesh.txt one.txt
done
balance=$(json_num out.txt attention_balance)
claim "U2 x R2: the ranks' attention work is reported (max / mean $balance)" is_number "$balance"

section "The mask matters"
run_hidden "$USP" train "${common[@]}" --world 1
losses out.txt >causal.txt
claim "without --eot (one causal sequence) the losses differ" eval '! same_losses causal.txt one.txt'

section "A sliding window of 32 keys on the ring"
run_hidden "$USP" train "${common[@]}" --eot 10 --window 32 --world 1
losses out.txt >window_one.txt
run "$USP" train --data text:docs.txt --seq 256 --batch 4 --steps 20 --log-every 20 --eval-samples 0 --eot 10 \
    --window 32 --world 4 --ring 4 --ulysses 1
claim "the run prints each rank's attention work" contains out.txt "attention work per rank"
run_hidden "$USP" train "${common[@]}" --eot 10 --window 32 --world 4 --ring 4 --ulysses 1
losses out.txt >window_ring.txt
claim "R4 with the window: the losses of one GPU with it" same_losses window_ring.txt window_one.txt
claim "the window changes the losses" eval '! same_losses window_one.txt one.txt'

section "What a window saves: llama-7b, 1M tokens, ring of 8"
run "$USP" plan --model llama-7b --seq 1048576 --world 8 --ring 8 --ulysses 1 --dtype bf16 --window 4096
share=$(grep -o '([0-9.]* of the' out.txt | grep -o '[0-9.]*' | head -n 1)
claim "the ring sends at most 2 / 7 of the full ring's bytes ($share)" eval 'is_number "$share" && awk_true "$share <= 2 / 7"'

section "Packing, balance: 60K + 8 x 1K + 3 x 20K tokens on 8 GPUs"
run "$USP" plan --model llama-7b --seq 128000 --world 8 --ring 8 --ulysses 1 --dtype bf16 --documents 60000,1000x8,20000x3
ring=$(grep -o 'over the ranks [0-9.]*' out.txt | grep -o '[0-9.]*$')
claim "the ring's busiest rank does over 1.5 x the mean ($ring)" eval 'is_number "$ring" && awk_true "$ring > 1.5"'
run "$USP" plan --model llama-7b --seq 128000 --world 8 --dtype bf16 --documents 60000,1000x8,20000x3
ulysses=$(grep -o 'over the ranks [0-9.]*' out.txt | grep -o '[0-9.]*$')
claim "Ulysses is even ($ulysses)" eval 'is_number "$ulysses" && awk_true "$ulysses < 1.001"'

finish
