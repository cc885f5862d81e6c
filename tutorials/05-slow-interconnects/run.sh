#!/usr/bin/env bash
# Lesson 5: slow interconnects. usp plan --sweep prices one training step of the real
# code (on shapes only) on a DGX H100, on a PCIe Gen4 box and on 2 and 8 DGX nodes,
# for every U x R split, with llama-7b's shapes and 8:1 grouped-query attention
# (llama-7b-gqa8.json). Usage: run.sh PATH/TO/usp. Checks which split wins where:
# pure Ulysses and pure Ring within 1% on NVSwitch (the ring's transfers hide, forward and backward), a hybrid or the ring
# on PCIe, Ulysses inside a node and Ring across nodes, and the head limit on U. Exit 1 if a claim fails.
source "$(dirname "$0")/../lib.sh"

# num KEY TEXT: the first number after "KEY": in TEXT.
num()
{
    grep -o "\"$1\":[-0-9.eE+]*" <<<"$2" | head -n 1 | cut -d: -f2
}

# sweep_rows FILE: one line per split of a --sweep --json summary, fastest first:
# "U R step_time_s comm_time_s", or "U R error MESSAGE" for a split the code refuses.
sweep_rows()
{
    sed 's/.*"sweep":\[//; s/{"world":/\n{"world":/g; s/{"ulysses":/\n{"ulysses":/g' "$1" |
        while IFS= read -r entry; do
            [[ $entry == *'"ulysses":'* ]] || continue
            local u r
            u=$(num ulysses "$entry") r=$(num ring "$entry")
            if [[ $entry == *'"error":'* ]]; then
                local message=${entry#*\"error\":\"}
                echo "$u $r error ${message%%\"\}*}"
            else
                echo "$u $r $(num step_time_s "$entry") $(num comm_time_s "$entry")"
            fi
        done
}

# plan_sweep ARGS...: runs usp plan --sweep --json and prints its table; rows in rows.txt.
plan_sweep()
{
    run_hidden "$USP" plan "$@" --sweep --json
    sweep_rows out.txt >rows.txt
    echo "  U x R, fastest first: step s, communication s"
    sed 's/^/    /' rows.txt
}

fastest() { head -n 1 rows.txt | cut -d' ' -f1-2; }                    # "U R"
comm_of() { awk -v u="$1" -v r="$2" '$1 == u && $2 == r { print $4 }' rows.txt; } # communication s

model=(--model "$LESSON_DIR/llama-7b-gqa8.json") # 32 query heads, 4 KV heads

section "One DGX H100 (NVSwitch: every GPU 370 GB/s to every other)"
plan_sweep "${model[@]}" --seq 65536 --world 8 --topology dgx-h100
claim "usp plan exits 0" test "$RC" = 0
# With 8:1 GQA the ring's K/V blocks are small and it sends them beside the attention, forward and
# backward: pure Ring is within 1% of pure Ulysses here, ahead of it (docs/cluster_model.md, "Overlap").
dgx_best=$(head -n 1 rows.txt | cut -d' ' -f3)
dgx_u8_step=$(awk '$1 == 8 && $2 == 1 { print $3 }' rows.txt)
claim "NVSwitch: pure Ulysses (U 8 x R 1, $dgx_u8_step s) is within 1% of the fastest split ($dgx_best s)" \
    eval 'is_number "$dgx_u8_step" && awk_true "$dgx_u8_step <= 1.01 * $dgx_best"'
dgx_u8=$(comm_of 8 1)
claim "Ulysses' communication is a small part of the step ($dgx_u8 s)" \
    eval 'is_number "$dgx_u8" && awk_true "$dgx_u8 < 0.15 * $(num step_time_s "$(first_line out.txt)")"'

section "One PCIe Gen4 box (2 GPUs a switch, 2 switches a socket, 2 sockets)"
plan_sweep "${model[@]}" --seq 65536 --world 8 --topology pcie-gen4
claim "usp plan exits 0" test "$RC" = 0
read -r fu fr <<<"$(fastest)"
best_mixed=$(awk '$1 > 1 && $2 > 1 { print $1, $2, $3; exit }' rows.txt)
read -r mu mr mstep <<<"$best_mixed"
u8_step=$(awk '$1 == 8 && $2 == 1 { print $3 }' rows.txt)
claim "PCIe: a mixed split (U $mu x R $mr, $mstep s) ranks above pure Ulysses ($u8_step s)" \
    eval 'is_number "$mstep" && awk_true "$mstep < $u8_step"'
claim "PCIe: pure Ulysses is not the fastest split (the fastest: U $fu x R $fr)" test "$fu" != 8
claim "PCIe: pure Ulysses is the slowest split" test "$(tail -n 1 rows.txt | cut -d' ' -f1-2)" = "8 1"
pcie_u8=$(comm_of 8 1)
claim "PCIe: pure Ulysses communicates at least 10x longer than on NVSwitch ($pcie_u8 s vs $dgx_u8 s)" \
    eval 'is_number "$pcie_u8" && awk_true "$pcie_u8 >= 10 * $dgx_u8"'

section "Two DGX H100 nodes (one 400 Gb/s NIC a GPU between them)"
plan_sweep "${model[@]}" --seq 131072 --world 16 --topology dgx-h100 --nodes 2
claim "usp plan exits 0" test "$RC" = 0
read -r fu fr <<<"$(fastest)"
claim "2 nodes: the fastest (U $fu x R $fr) keeps every all-to-all inside a node and rings across" \
    eval 'test "$fu" -le 8 && test "$fr" -ge 2'
best2=$(head -n 1 rows.txt | cut -d' ' -f3) u8r2=$(awk '$1 == 8 && $2 == 2 { print $3 }' rows.txt)
claim "2 nodes: one Ulysses group per node and a ring of 2 across (U 8 x R 2, $u8r2 s) is within 0.5% of it" \
    eval 'is_number "$u8r2" && awk_true "$u8r2 <= 1.005 * $best2"'
claim "2 nodes: an all-to-all across both nodes (U 16) communicates longer than U 8 x R 2" \
    eval 'awk_true "$(comm_of 16 1) > $(comm_of 8 2)"'
claim "2 nodes: pure Ring (U 1 x R 16) is the slowest" test "$(tail -n 1 rows.txt | cut -d' ' -f1-2)" = "1 16"

section "Eight nodes, 64 GPUs: U cannot exceed the 32 heads"
plan_sweep "${model[@]}" --seq 262144 --world 64 --topology dgx-h100 --nodes 8
claim "usp plan exits 0" test "$RC" = 0
claim "U 64 x R 1 is refused: more Ulysses ranks than the 32 heads" \
    eval 'grep -q "^64 1 error .*--ulysses 64 is larger than the 32 heads" rows.txt'
claim "8 nodes: one Ulysses group per node, Ring across the nodes (U 8 x R 8) is the fastest" \
    test "$(fastest)" = "8 8"

finish
