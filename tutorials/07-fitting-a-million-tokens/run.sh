#!/usr/bin/env bash
# Lesson 7: fitting a million tokens. usp plan prices one step of llama-7b at 1M tokens
# on 8 H100s (1.55 TB a GPU in fp32) and names the memory options that make it fit;
# each option, added one at a time, lowers the peak; recomputation costs time and is not
# counted in MFU; and on the tiny model the same options train as the plain step does.
# Usage: run.sh PATH/TO/usp. Exit 1 if a claim fails.
source "$(dirname "$0")/../lib.sh"

# text_of FILE KEY: the string after "KEY":" in FILE (or "null").
text_of()
{
    local v
    v=$(grep -o "\"$2\":\(null\|\"[^\"]*\"\)" "$1" | head -n 1 | cut -d: -f2-)
    v=${v#\"}
    echo "${v%\"}"
}

# peak FILE: the largest of the per-rank peaks of a --json summary.
peak()
{
    grep -o '"peak_bytes":\[[0-9,]*\]' "$1" | tr -d '"peak_bytes:[]' | tr ',' '\n' | sort -n | tail -n 1
}

plan=(plan --model llama-7b --seq 1048576 --world 8 --topology dgx-h100 --json)

section "Plain: everything fp32 and replicated"
run_hidden "$USP" "${plan[@]}"
claim "usp plan exits 0" test "$RC" = 0
plain_peak=$(peak out.txt)
claim "it does not fit: $plain_peak bytes a GPU of 80 GB" eval 'awk_true "$plain_peak > 1.2e12" && contains out.txt "\"fits\":false"'
options=$(text_of out.txt would_fit_with)
claim "the plan names options that would make it fit: $options" test "$options" != null -a -n "$options"

section "With the options the plan named"
# shellcheck disable=SC2086 # the options are words
run_hidden "$USP" "${plan[@]}" $options
fit_peak=$(peak out.txt)
claim "it fits: $fit_peak bytes" eval 'contains out.txt "\"fits\":true" && awk_true "$fit_peak <= 80e9"'

section "One option at a time, in the order the plan tries them"
added=()  # the options so far, ZeRO's stage apart: a later stage replaces an earlier one
zero=0
previous=$plain_peak
plain_step=""
for option in "--dtype bf16" "--tiled-loss" "--zero 1" "--zero 2" "--tiled-mlp" "--recompute" "--zero 3"; do
    if [[ $option == --zero* ]]; then
        zero=${option#--zero }
    else
        # shellcheck disable=SC2206 # the option is words
        added+=($option)
    fi
    run_hidden "$USP" "${plan[@]}" "${added[@]}" --zero "$zero"
    now=$(peak out.txt)
    claim "$option lowers the peak: $previous -> $now bytes" awk_true "$now < $previous"
    previous=$now
    if [[ $option == --tiled-mlp ]]; then
        plain_step=$(json_num out.txt step_time_s)
        plain_mfu=$(json_num out.txt mfu)
    fi
    if [[ $option == --recompute ]]; then
        step=$(json_num out.txt step_time_s)
        recomputed=$(json_num out.txt recompute_flops)
        mfu=$(json_num out.txt mfu)
        claim "recomputation costs time: $plain_step -> $step s a step" awk_true "$step > 1.1 * $plain_step"
        claim "the recomputed $recomputed FLOPs are not counted in MFU ($plain_mfu -> $mfu)" \
            awk_true "$recomputed > 1e17 && $mfu < $plain_mfu"
    fi
done

section "The same options train the tiny model as the plain step does"
train=(train --world 4 --ulysses 2 --ring 2 --steps 20 --log-every 20 --eval-samples 0 --json)
run_hidden "$USP" "${train[@]}"
ref=$(json_num <(last_line out.txt) loss)
ref_peak=$(peak out.txt)
claim "plain: loss $ref after 20 steps, peak $ref_peak bytes a rank" is_number "$ref"
run_hidden "$USP" "${train[@]}" --recompute
loss=$(json_num <(last_line out.txt) loss)
claim "--recompute: the same loss, bit for bit ($loss)" test "$loss" = "$ref"
run_hidden "$USP" "${train[@]}" --zero 3 --recompute --tiled-mlp --tiled-loss --tile-rows 7
loss=$(json_num <(last_line out.txt) loss)
small_peak=$(peak out.txt)
claim "ZeRO 3, recomputation and tiles: loss $loss = $ref within 1e-5" rel_close "$loss" "$ref" 1e-5
claim "... in less memory: $small_peak bytes a rank" awk_true "$small_peak < 0.8 * $ref_peak"

section "bf16 computes on the CPU too"
run_hidden "$USP" "${train[@]}" --dtype bf16
loss=$(json_num <(last_line out.txt) loss)
bf16_peak=$(peak out.txt)
claim "bf16: loss $loss after 20 steps, within 5% of fp32's $ref" rel_close "$loss" "$ref" 5e-2
claim "... in less memory: $bf16_peak bytes a rank against $ref_peak" awk_true "$bf16_peak < $ref_peak"
run "$USP" train --meta --dtype bf16 --zero 3 --steps 2 --eval-samples 0
claim "the same run on shapes only works" test "$RC" = 0

finish
