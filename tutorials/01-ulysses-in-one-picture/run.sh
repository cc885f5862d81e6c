#!/usr/bin/env bash
# Lesson 1: what Ulysses does, in one picture and one byte count.
# Usage: run.sh PATH/TO/usp. Checks the picture's slices and sizes, and that the
# bytes every rank sends in its all-to-alls (from the trace) equal the closed form
# 4 (U-1)/U B T D (2 H + 2 Hkv') per pass (docs/attention.md). Exit 1 if a claim fails.
source "$(dirname "$0")/../lib.sh"

# all_to_all_bytes TRACE RANK: bytes RANK sent in all_to_all calls (not all_to_all_v).
all_to_all_bytes()
{
    awk -v who="rank=$2" '$1 == who && $4 == "op=all_to_all" {
        for (i = 5; i <= NF; i++) if ($i ~ /^bytes=/) { sub(/^bytes=/, "", $i); sum += $i }
    } END { printf "%d\n", sum }' "$1"
}

# closed_form U T D H HKV PASSES: 4 (U-1)/U T D (2 H + 2 Hkv') bytes per pass, Hkv' = Hkv
# when U divides Hkv, U when Hkv divides U (each rank then needs a whole KV head).
closed_form()
{
    awk -v U="$1" -v T="$2" -v D="$3" -v H="$4" -v K="$5" -v P="$6" 'BEGIN {
        k = (K % U == 0) ? K : U
        printf "%d\n", 4 * (U - 1) / U * T * D * (2 * H + 2 * k) * P
    }'
}

section "The picture: sequence -> heads"
picture=a2a.svg
run "$USP" viz --ulysses 4 --seq 16 --heads 8 --dot a2a.svg
if [[ $RC == 2 ]] && contains err.txt "Graphviz"; then # a build without Graphviz writes .dot only
    picture=a2a.dot
    run "$USP" viz --ulysses 4 --seq 16 --heads 8 --dot a2a.dot
fi
claim "usp viz exits 0 and writes $picture" test "$RC" = 0 -a -s "$picture"
[[ $picture == a2a.svg ]] && claim "the picture is an SVG" contains a2a.svg "<svg"
run "$USP" viz --ulysses 4 --seq 16 --heads 8 --dot a2a.dot
claim "before: rank 1 holds tokens 4-7 with all 8 heads" contains a2a.dot "rank 1<br/>tokens 4-7, all 8 heads"
claim "after: rank 1 holds all 16 tokens of heads 2-3" contains a2a.dot "rank 1<br/>all 16 tokens, heads 2-3"
claim "12 slices move (3 peers x 4 ranks), each Q 128 B + K and V 256 B" \
    test "$(grep -c 'label="Q 128 B + KV 256 B"' a2a.dot)" = 12
claim "4 slices stay where they are (a rank's own heads)" test "$(grep -c 'label="stays"' a2a.dot)" = 4
# A slice's Q: 4 tokens x 2 heads x head_dim 4 x 4 bytes = 128 B; K and V as much each (8 KV heads).
q_slice=$((4 * 2 * 4 * 4))
claim "the output O comes back along the reverse arrows: $q_slice B each" contains a2a.dot "$q_slice B per arrow"

section "The byte count: selftest trace against the closed form"
# selftest defaults: 32 tokens a rank, 8 heads, 2 KV heads, head_dim 16, 2 layers (forward + backward each).
run "$USP" selftest --world 4 --ulysses 4 --trace selftest.txt
claim "selftest passes" test "$RC" = 0
got=$(all_to_all_bytes selftest.txt 0)
want=$(closed_form 4 32 16 8 2 4) # 2 layers x (forward + backward)
echo "rank 0 sent $got bytes in all_to_all; closed form 4 (U-1)/U T D (2H + 2U) x 4 passes = $want"
claim "U=4, 2 KV heads (each rank needs a whole KV head: Hkv' = U): $got = $want" test "$got" = "$want"

run "$USP" selftest --world 4 --ulysses 4 --kv-heads 8 --trace selftest8.txt
got=$(all_to_all_bytes selftest8.txt 0)
want=$(closed_form 4 32 16 8 8 4)
claim "U=4, 8 KV heads (Hkv' = Hkv): $got = $want" test "$RC" = 0 -a "$got" = "$want"

run "$USP" selftest --world 8 --ulysses 2 --trace selftest2.txt
got=$(all_to_all_bytes selftest2.txt 0)
want=$(closed_form 2 32 16 8 2 4)
claim "U=2 (DP 4): only (U-1)/U = 1/2 leaves the rank: $got = $want" test "$RC" = 0 -a "$got" = "$want"

section "The same count in a real training step"
# The tiny model (4 heads, 2 KV heads, head_dim 16, 2 layers), seq 64 on 4 ranks
# (T = 16 tokens a rank), batch 16: B T = 256 rows a rank.
run "$USP" train --model tiny --seq 64 --batch 16 --steps 1 --eval-samples 0 --trace train.txt
got=$(all_to_all_bytes train.txt 0)
want=$(closed_form 4 256 16 4 2 4)
claim "one training step, rank 0: $got = $want bytes" test "$RC" = 0 -a "$got" = "$want"

finish
