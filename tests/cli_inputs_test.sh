#!/usr/bin/env bash
# Inputs of `usp` that once passed silently or crashed (issues 15, 16 and on): resumed runs, NaN and Inf,
# output paths, host memory that grew with the world, the attention kernel named, postmortem.
# Usage: cli_inputs_test.sh PATH/TO/usp
set -u
source "$(dirname "$0")/cli_lib.sh" "$1"
export LSAN_OPTIONS="suppressions=$(cd "$(dirname "$0")/.." && pwd)/viz/graphviz_lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"

# --resume continues the run that saved the checkpoint (issue 15): its seed and model, and steps still to
# train. Before, a --seed or --model beside --resume was silently ignored or obeyed, a checkpoint past --steps
# trained nothing with exit 0, and an optimizer step of "" or 99999999999999999999 was taken as 0 or 2^63 - 1.
# set_saved_step DIR TEXT MANIFEST_STEP: DIR's optimizer.safetensors metadata says step TEXT, its manifest
# MANIFEST_STEP and the file's new size (a whole checkpoint whose step field is TEXT)
set_saved_step() {
    perl -e 'my ($dir, $text, $manifest_step) = @ARGV;
        my $file = "$dir/optimizer.safetensors";
        open(my $in, "<:raw", $file) or die; local $/; my $bytes = <$in>; close $in;
        my $n = unpack("Q<", substr($bytes, 0, 8));
        my ($header, $tensors) = (substr($bytes, 8, $n), substr($bytes, 8 + $n));
        $header =~ s/\s+$//; $header =~ s/"step":\s*"[^"]*"/"step":"$text"/ or die "no step in $file";
        $header .= " " x ((8 - length($header) % 8) % 8);
        open(my $out, ">:raw", $file) or die; print $out pack("Q<", length $header), $header, $tensors; close $out;
        my $size = -s $file, $manifest = "$dir/usp_checkpoint.json";
        open($in, "<", $manifest) or die; my $json = <$in>; close $in;
        $json =~ s/("optimizer.safetensors":\s*)\d+/$1$size/ or die; $json =~ s/("step":\s*)\d+/$1$manifest_step/ or die;
        open($out, ">", $manifest) or die; print $out $json; close $out;' "$@"
}
small=(--seq 64 --batch 2 --eval-samples 0 --log-every 1)
"$usp" train --seed 7 --steps 4 --until 2 --save "$work/seed7" "${small[@]}" >/dev/null 2>&1
expect 2 "--seed 8 beside --resume $work/seed7: the checkpoint was saved by a run with seed 7" -- \
    train --resume "$work/seed7" --seed 8 --steps 4 "${small[@]}"
expect 0 "done: loss" -- train --resume "$work/seed7" --seed 7 --steps 4 "${small[@]}"
expect 2 "--model llama-1b beside --resume $work/seed7: not the checkpoint's model" -- \
    train --resume "$work/seed7" --model llama-1b --steps 4 "${small[@]}"
expect 0 "done: loss" -- train --resume "$work/seed7" --model tiny --steps 4 "${small[@]}"
expect 2 "--resume $work/seed7: the checkpoint is at step 2; --steps 2 would train nothing: give --steps above 2" -- \
    train --resume "$work/seed7" --steps 2 "${small[@]}"
expect 2 "the checkpoint is at step 2; --steps 1 would train nothing" -- train --resume "$work/seed7" --steps 1 "${small[@]}"
# without --seed the saved seed 7 continues the data stream: step 4's loss is the uninterrupted run's
straight=$("$usp" train --seed 7 --steps 4 --json "${small[@]}" 2>&1 | grep '"step":4,' | grep -o '"loss":[^,]*')
resumed=$("$usp" train --resume "$work/seed7" --steps 4 --json "${small[@]}" 2>&1 | grep '"step":4,' |
    grep -o '"loss":[^,]*')
check "resume without --seed: step 4 $resumed, uninterrupted with --seed 7: $straight" \
    test -n "$straight" -a "$straight" = "$resumed"
for step in "" 99999999999999999999; do
    rm -rf "$work/bad_step" && cp -r "$work/seed7" "$work/bad_step"
    set_saved_step "$work/bad_step" "$step" "$([[ -z $step ]] && echo 0 || echo 9223372036854775807)"
    expect 2 "$work/bad_step/optimizer.safetensors: the metadata field \"step\" is \"$step\": expected a whole number" -- \
        train --resume "$work/bad_step" --steps 4 "${small[@]}"
done
rm -rf "$work/seed7" "$work/bad_step"

# NaN and Inf (issue 15, class 4): a diverging --lr stops the run at its step (exit 1) before any save,
# and a checkpoint holding a NaN weight is refused on load (exit 2) naming the tensor and the element
out=$(timeout 60 "$usp" train --lr 1e6 --steps 30 --seq 64 --batch 2 --eval-samples 0 --save "$work/diverged" 2>&1)
rc=$?
check "--lr 1e6 stops with exit 1 naming the step and --lr (exit $rc: $(echo "$out" | tail -1))" \
    test $rc -eq 1 -a -n "$(echo "$out" | grep -E 'step [0-9]+ of 30: the (loss|gradient norm) is .*lower --lr')"
check "a diverged run creates no --save directory" test ! -e "$work/diverged"
expect 0 "done: loss" -- train --steps 1 --seq 64 --batch 2 --eval-samples 0 --save "$work/finite"
# the data section starts after the 8-byte header length and the header; its first float is
# element 0 of the first tensor written, the token embedding: make it a NaN (0x7fc00000, little-endian)
header=$(od -An -tu8 -N8 "$work/finite/model.safetensors" | tr -d ' ')
printf '\x00\x00\xc0\x7f' | dd of="$work/finite/model.safetensors" bs=1 seek=$((8 + header)) conv=notrunc 2>/dev/null
expect 2 "model.embed_tokens.weight holds nan at element 0" -- \
    train --resume "$work/finite" --steps 2 --seq 64 --batch 2 --eval-samples 0 --save "$work/from_nan"
check "a refused resume creates no --save directory" test ! -e "$work/from_nan"
rm -rf "$work/finite"

# Output paths (issue 15): never cut, a path the OS cannot take refused naming the limit (exit 2, no file
# written); a link stays a link and its target gets the output, a FIFO or a device is written through
out_dir=$work/paths
mkdir -p "$out_dir"
name99=$(printf 'd%.0s' {1..99})
deep=$out_dir
for _ in {1..15}; do deep=$deep/$name99; done # about 1550 characters, every name valid
mkdir -p "$deep"
over_path_max=$out_dir
while [[ ${#over_path_max} -le 4096 ]]; do over_path_max=$over_path_max/$name99; done
over_name_max=$out_dir/$(printf 'n%.0s' {1..256})
expect 2 "--save $over_path_max: the path is" -- "${one[@]}" --save "$over_path_max"
expect 2 "PATH_MAX" -- "${one[@]}" --save "$over_path_max"
expect 2 "NAME_MAX" -- "${one[@]}" --save "$over_name_max"
expect 2 "--trace $over_name_max: the name" -- "${one[@]}" --trace "$over_name_max"
check "refused long paths leave no file" test "$(ls "$out_dir")" = "$name99"
expect 0 "done: loss" -- "${one[@]}" --save "$deep/ck" --trace "$deep/t.json"
check "a 1500-character --save writes model.safetensors under its full name" test -s "$deep/ck/model.safetensors"
check "a 1500-character --save writes config.json and optimizer.safetensors" \
    test -s "$deep/ck/config.json" -a -s "$deep/ck/optimizer.safetensors"
check "a 1500-character --save writes nothing beside its directory" test "$(ls "$deep")" = "$(printf 'ck\nt.json')"
check "a 1500-character --trace is written under its full name" grep -q traceEvents "$deep/t.json"
# a message longer than 1024 bytes keeps its reason at the end
expect 2 "does not exist (No such file or directory); create it first" -- "${one[@]}" --save "$deep/missing/ck"
# a name of 250 characters is valid: the temporary name beside it must not be too long
name250=$(printf 'x%.0s' {1..245}).json
expect 0 "done: loss" -- "${one[@]}" --trace "$out_dir/$name250"
check "a --trace name of 250 characters is written" grep -q traceEvents "$out_dir/$name250"
rm -rf "${out_dir:?}"/*
echo old >"$out_dir/real.json"
ln -s real.json "$out_dir/link.json"
expect 0 "done: loss" -- "${one[@]}" --trace "$out_dir/link.json"
check "--trace through a symlink keeps the link" test -L "$out_dir/link.json"
check "--trace through a symlink writes its target" grep -q traceEvents "$out_dir/real.json"
mkfifo "$out_dir/pipe"
timeout 60 cat "$out_dir/pipe" >"$out_dir/from_pipe" &
reader=$!
expect 0 "done: loss" -- "${one[@]}" --trace "$out_dir/pipe"
check "--trace to a FIFO leaves a FIFO" test -p "$out_dir/pipe"
# the reader ends at the writer's close; killed at once it could lose what it had not copied yet (seen once
# in CI); where usp never opened the FIFO, the timeout ends it
wait "$reader" 2>/dev/null
check "--trace to a FIFO writes through it to its reader" grep -q "# usp trace:" "$out_dir/from_pipe"
expect 0 "done: loss" -- "${one[@]}" --trace /dev/null
check "--trace /dev/null leaves /dev/null a character device" test -c /dev/null
check "--trace /dev/null leaves nothing beside it" test -z "$(ls /dev | grep 'null\.tmp')"
# /dev/stdout is a link to /proc/self/fd/1, which ends in a pipe here ("pipe:[N]", not a path): written through
expect 0 "# usp trace:" -- "${one[@]}" --trace /dev/stdout
check "--trace /dev/stdout leaves /dev/stdout a link" test -L /dev/stdout

# issue 15: host memory that grows with W^2, R^2 or N; each timed out (or ran out of memory) before
limit=20 expect 2 "--world 4096 x --ring 4096" -- plan --world 4096 --ring 4096 --seq 8192
# 32 s under the sanitizers alone (measured), more beside the other tests
limit=$([[ -n ${ASAN_OPTIONS:-} ]] && echo 120 || echo 60) expect 0 "planned in" -- plan --world 512 --ring 512 --seq 1024
# 7 s here, 48 s under the sanitizers (scripts/test.sh sets ASAN_OPTIONS there); before: minutes and 16.8 GB
limit=$([[ -n ${ASAN_OPTIONS:-} ]] && echo 150 || echo 60) expect 0 "planned in" -- plan --seq 1073741824
limit=20 expect 2 "--world 4096 with 4096 heads" -- selftest --world 4096
# issue 15: each simulated rank's program runs in full, so a world past the planner's cap on rank-layers is
# refused at once, naming the largest world that runs (before: 88-140 s and 1.1 GB; after the O(W) collectives:
# 70 s). With ZeRO every rank runs; without, one a Ulysses group (issue 28: sim/mirrors.c), so U 32 plans
# W = 4096 (15 s here) and U 2 is refused at W / U = 2048 simulated ranks
limit=5 expect 2 "usp plan: --world 4096 x 32 layers (--model llama-7b) = 131072 rank-layers to simulate, more than the planner's 32768" -- \
    plan --world 4096 --ulysses 32 --model llama-7b --seq 8192 --zero 1
limit=5 expect 2 "use --world 1024 (DP 32 of U 32 x R 1)" -- plan --world 4096 --ulysses 32 --model llama-7b --seq 8192 --zero 1
limit=5 expect 2 "(--world 4096 / --ulysses 2 simulated ranks) x 32 layers (--model llama-7b) = 65536 rank-layers" -- \
    plan --world 4096 --ulysses 2 --model llama-7b --seq 8192
limit=5 expect 2 "use --world 2048 (DP 1024 of U 2 x R 1)" -- plan --world 4096 --ulysses 2 --model llama-7b --seq 8192
limit=5 expect 2 "rank-layers to simulate" -- train --meta --world 4096 --ulysses 32 --model llama-7b --seq 8192 --steps 1 --batch 128
# issue 16: the attention kernel is a named choice, printed and in the JSON; FA3 only on Hopper
expect 0 "attention kernel: fa2 (FlashAttention-2 rates), 35% / 30%" -- plan
expect 0 "attention kernel: fa3 (FlashAttention-3 rates), 75% / 50%" -- plan --attention-kernel fa3
expect 0 '"attention_kernel":"sdpa"' -- plan --attention-kernel sdpa --json
expect 2 "--attention-kernel fa3: GPU a100-80g is not Hopper" -- plan --topology dgx-a100 --attention-kernel fa3
expect 2 "--attention-kernel fa4: not a kernel the model knows" -- plan --attention-kernel fa4
expect 2 "--attention-kernel fa3: GPU a100-80g is not Hopper" -- train --meta --topology dgx-a100 --attention-kernel fa3 --steps 1
expect 0 "--attention-kernel" -- plan --help
# issue 16: no memory option fits U8 x DP8 (llama-13b at 1M tokens on 64 GPUs), another split of the 64 does:
# the smallest larger SP degree (16; U16 does not divide the 40 heads), one sequence a replica
limit=60 expect 0 "the same 64 GPUs split as --ulysses 8 --ring 2 (DP 4, --batch 4) would fit" -- \
    plan --world 64 --ulysses 8 --model llama-13b --seq 1048576
# issue 15: train --meta takes the planner's cap on simulated ring steps (W x R x layers x sequences per
# replica x steps and evaluation batches): before, 4096 x 4096 ran past any timeout
limit=20 expect 2 "usp train: --world 4096 x --ring 4096 x 2 layers (--model tiny) x 16 sequences per replica (--batch 16 over 1 replicas) x 5 steps and evaluation batches" -- \
    train --meta --world 4096 --ring 4096 --seq 8192 --steps 1
limit=20 expect 2 "more than the simulator's 1048576" -- train --meta --world 64 --ring 64 --seq 1024
limit=20 expect 0 "done" -- train --meta --world 64 --ulysses 4 --ring 16 --seq 1024 --batch 1 --steps 2 --eval-samples 0
# a shape the ranks would refuse is refused before W ranks are built, naming no rank (before: 2.7 s and
# 466 MB at W = 4096, with "rank 0:" in front)
limit=5 expect 2 "usp plan: --seq 64 does not divide for --ulysses 4096" -- plan --world 4096
limit=5 expect 2 "usp plan: --ulysses 4096 is larger than the 4 heads" -- plan --world 4096 --seq 4096
limit=5 expect 2 "usp train: --world 4096 with --ring 64 makes --ulysses 64 by default (W / R), and for model tiny: --ulysses 64 is larger than the 4 heads" -- train --meta --world 4096 --ring 64 --seq 4096 --steps 1
# selftest and plan check --trace and --dot before the run, as train does (before: after the run, exit 1)
expect 2 "--trace $work/missing/t.json: the directory $work/missing does not exist" -- selftest --trace "$work/missing/t.json"
expect 2 "--dot $work/missing/t.dot: the directory $work/missing does not exist" -- selftest --dot "$work/missing/t.dot"
expect 2 "--trace $work: is a directory" -- plan --trace "$work"
expect 2 "--trace $work/missing/t.json: the directory $work/missing does not exist" -- plan --trace "$work/missing/t.json"
# --until at or below the checkpoint's step trains nothing: refused like --steps
expect 0 "done: loss" -- train --steps 10 --until 4 --seq 64 --batch 2 --eval-samples 0 --save "$work/at4"
expect 2 "--resume $work/at4: the checkpoint is at step 4; --until 4 would train nothing" -- \
    train --resume "$work/at4" --steps 10 --until 4 --seq 64 --batch 2 --eval-samples 0
expect 2 "--until 3 would train nothing: give --until above 4" -- \
    train --resume "$work/at4" --steps 10 --until 3 --seq 64 --batch 2 --eval-samples 0
expect 0 "done: loss" -- train --resume "$work/at4" --steps 10 --until 5 --seq 64 --batch 2 --eval-samples 0
rm -rf "$work/at4"
# a --data path of 600+ characters is named whole (it was kept in 512 bytes)
deep_data=$work/data
for _ in {1..7}; do deep_data=$deep_data/$(printf 'd%.0s' {1..99}); done
mkdir -p "$deep_data"
printf 'short text' >"$deep_data/short.txt"
expect 2 "--data $deep_data/short.txt holds 10 tokens; --seq 64 needs at least" -- \
    train --data "text:$deep_data/short.txt" --steps 1 --seq 64 --batch 2 --eval-samples 0
rm -rf "$work/data"

# usp postmortem: the records of the skip example (tests/golden/postmortem-skip, kept equal to what
# tests/test_postmortem.c's recorders write) give the simulator's report, exit 3; without rank 1's
# record, a rank failure naming it (exit 4); no records or a cut record: exit 2 naming the file
records=$(dirname "$0")/golden/postmortem-skip
# The call sites' lines come from the records themselves: an edit above a call moves its line, and
# test_postmortem's fixture check (USP_UPDATE_GOLDEN=1) is the one place that follows it.
site_line() { grep -A1 "\"file\": \"$1\"" "$records/rank-2.usp-flight.json" | sed -nE 's/.*"line": ([0-9]+).*/\1/p' | head -n 1; }
grads_site=core/model/grad_buckets.c:$(site_line core/model/grad_buckets.c)
ulysses_site=core/parallel/ulysses.c:$(site_line core/parallel/ulysses.c)
expect 0 "usp train --backend mpi --timeout S --dump-dir DIR" -- postmortem --help
expect 2 "expected the directory of flight records first" -- postmortem
expect 2 "$work/nothing: cannot read this directory" -- postmortem "$work/nothing"
mkdir "$work/pm" && expect 2 "$work/pm: no flight records in it (files rank-<R>.usp-flight.json" -- postmortem "$work/pm"
expect 3 "wait chain: rank 0 waits in all_to_all #16 on ulysses[0] ($ulysses_site) for rank 2; rank 2 waits in all_reduce #6 on world ($grads_site) for rank 0; a cycle" -- postmortem "$records"
expect 3 "  rank 2: blocked in all_reduce #6 on world ($grads_site) all_reduce(count=107328, f32, sum), waiting for rank 0, 1, 3" -- postmortem "$records"
expect 3 "wait-for picture in $work/pm.dot" -- postmortem "$records" --dot "$work/pm.dot"
if grep -q "usp postmortem of the flight records in" "$work/pm.dot" 2>/dev/null; then passed=$((passed + 1)); else
    failed=$((failed + 1)); echo "FAIL: postmortem --dot wrote no wait-for picture"; fi
cp "$records"/rank-[023].usp-flight.json "$work/pm/"
expect 4 "  rank 1: no flight record: killed, or never started" -- postmortem "$work/pm"
head -c 300 "$records/rank-1.usp-flight.json" >"$work/pm/rank-1.usp-flight.json"
expect 2 "$work/pm/rank-1.usp-flight.json: not a whole JSON flight record" -- postmortem "$work/pm"

# usp plan --compare (docs/viz.md): a trace of the simulator against the plan of the same run gives ratios of 1
# (the same cost model on the same code: only the file's 12 digits of each time differ), |ratio - 1| < 1e-6 for
# the step, compute and communication and the named phases, on a Ulysses mesh and a ring x DP one; options beside
# the file must be the run's; bad files exit 2 naming the file and what is wrong (the measured run: mpi_test.sh)
cmp_dir=$work/compare
mkdir -p "$cmp_dir"
sim_ratios() {
    "$usp" plan --compare "$1" --json | python3 -c "
import json, sys
d = json.load(sys.stdin)
bad = [(x['phase'], x['ratio']) for x in d['phases']
       if x['phase'] in ('step', 'compute', 'communication') + tuple(sys.argv[1:]) and abs(x['ratio'] - 1) >= 1e-6]
print('ok' if not bad else bad)" "${@:2}" 2>&1
}
# --compare-ops: every op of the sim trace priced as the plan prices it (ratio 1, the same calls a step), the
# collectives by op and size
sim_op_ratios() {
    "$usp" plan --compare "$1" --compare-ops --json | python3 -c "
import json, sys
ops = json.load(sys.stdin)['ops']
bad = [(x['op'], x['ratio'], x['measured_calls'], x['predicted_calls']) for x in ops
       if x['ratio'] is None or abs(x['ratio'] - 1) >= 1e-6 or x['measured_calls'] != x['predicted_calls']]
names = [x['op'] for x in ops]
missing = [n for n in sys.argv[1:] if not any(m == n or m.startswith(n + ' ') for m in names)]
print('ok' if ops and not bad and not missing else (bad, missing))" "${@:2}" 2>&1
}
if command -v python3 >/dev/null; then
    "$usp" train --world 2 "${short[@]:1}" --trace "$cmp_dir/u.json" >/dev/null 2>&1
    check "plan --compare of a Ulysses sim trace: ratios of 1" test "$(sim_ratios "$cmp_dir/u.json" gemm attention all_to_all)" = ok
    "$usp" train --world 4 --ulysses 1 --ring 2 "${short[@]:1}" --trace "$cmp_dir/r.json" >/dev/null 2>&1
    check "plan --compare of a ring x DP sim trace: ratios of 1" test "$(sim_ratios "$cmp_dir/r.json" ring_p2p all_reduce)" = ok
    check "plan --compare-ops of a Ulysses sim trace: every op's ratio 1" \
        test "$(sim_op_ratios "$cmp_dir/u.json" gemm attention_forward adamw_step all_to_all all_reduce)" = ok
    check "plan --compare-ops of a ring x DP sim trace: every op's ratio 1" \
        test "$(sim_op_ratios "$cmp_dir/r.json" gemm sendrecv all_reduce)" = ok
fi
expect 0 "an op: the mean over the ranks of its time a step" -- plan --compare "$cmp_dir/u.json" --compare-ops
expect 2 "--compare-ops without --compare FILE" -- plan --compare-ops
expect 0 "the run: step 2 of 2, modelled by the simulator on dgx-h100, mean of 2 ranks" -- plan --compare "$cmp_dir/u.json"
expect 0 "the run: steps 1-2 of 2, each figure the median of the 2, modelled" -- plan --compare "$cmp_dir/u.json" --compare-steps 2
expect 2 "$cmp_dir/u.json: a median over the last 3 steps, but every rank completed 2" -- plan --compare "$cmp_dir/u.json" --compare-steps 3
expect 2 "--compare-steps 2 without --compare FILE" -- plan --compare-steps 2
expect 2 "--world 8 beside --compare $cmp_dir/r.json: the run was --world 4" -- plan --compare "$cmp_dir/r.json" --world 8
head -c 2000 "$cmp_dir/r.json" >"$cmp_dir/cut.json"
expect 2 "$cmp_dir/cut.json: not JSON at line" -- plan --compare "$cmp_dir/cut.json"
expect 2 "(the file is truncated" -- plan --compare "$cmp_dir/cut.json"
echo '{"traceEvents": []}' >"$cmp_dir/other.json"
expect 2 "$cmp_dir/other.json: a Chrome trace, but not one usp wrote" -- plan --compare "$cmp_dir/other.json"
echo 'hello' >"$cmp_dir/text.json"
expect 2 "$cmp_dir/text.json: not JSON" -- plan --compare "$cmp_dir/text.json"
"$usp" plan --trace "$cmp_dir/plan.json" >/dev/null 2>&1
expect 2 "$cmp_dir/plan.json: a usp trace without the run's options" -- plan --compare "$cmp_dir/plan.json"
expect 2 "$cmp_dir/missing.json: cannot read it" -- plan --compare "$cmp_dir/missing.json"

"$usp" "${short[@]}" --save "$work/eval_ckpt" >/dev/null 2>&1 # a checkpoint of the tiny model

# usp train (sim) in one of several launched processes: refused before anything runs (mpi_test.sh: under
# mpirun itself); a Slurm batch script's SLURM_NTASKS, without srun, is no launcher.
OMPI_COMM_WORLD_SIZE=4 expect 2 "--backend sim under a launcher of 4 processes (OMPI_COMM_WORLD_SIZE=4): each process would simulate every rank on its own; add --backend mpi" -- \
    train --steps 1 --seq 64 --batch 2 --eval-samples 0
SLURM_STEP_NUM_TASKS=8 expect 2 "add --backend mpi" -- eval --resume "$work/eval_ckpt" --eval-samples 2
SLURM_NTASKS=8 expect 0 "done: loss" -- train --steps 1 --seq 64 --batch 2 --eval-samples 0

# Messages that name what the user typed: --resume of a name that is no directory; the model fields by name;
# the Ulysses degree that --world made by default, with a mesh that works
expect 2 "--resume nodir: no such directory; --resume takes the directory that a --save wrote" -- train --resume nodir
expect 2 "--resume tiny: no such directory; --resume takes the directory that a --save wrote, or a Hugging Face checkpoint directory (--model tiny names the preset" -- \
    train --resume tiny
expect 2 "(family gpt2 vs llama: the first from --model" -- train --model gpt2-124m --resume "$work/eval_ckpt"
expect 2 "--world 8 with --ring 1 makes --ulysses 8 by default (W / R), and for model tiny: --ulysses 8 is larger than the 4 heads" -- \
    train --world 8 --steps 1
expect 0 "done: loss" -- train --world 8 --ulysses 4 --ring 2 --steps 1 --seq 64 --batch 2 --eval-samples 0

# The progress line: the learning rate, the gradient norm, the time elapsed and left (issue 29)
out=$("$usp" train --steps 4 --seq 64 --batch 2 --eval-samples 0 --log-every 2 2>&1)
check "the progress line has lr, grad norm, elapsed and left" grep -qE \
    '^step +4/4  loss [0-9.]+  lr [0-9.]+e[-+][0-9]+  grad norm [0-9.]+ +[0-9]+ tokens/s  [0-9]+:[0-9]{2} elapsed, 0:00 left  sim ' \
    <<<"$out"
out=$("$usp" train --meta --steps 2 --log-every 1 2>&1)
check "on shapes only the progress line has no loss and no tokens/s" grep -qE '^step +2/2  shapes only  lr ' <<<"$out"

# usp help CMD is usp CMD --help; a checkpoint directory takes the user's umask (mkdtemp made it 0700);
# a data file of fewer sequences than one batch is a warning (issue 29, item 8)
expect 0 "usage: usp train [options]" -- help train
expect 2 "unknown command 'bogus'" -- help bogus
(umask 022 && "$usp" "${one[@]}" --save "$work/mode022" >/dev/null 2>&1)
(umask 077 && "$usp" "${one[@]}" --save "$work/mode077" >/dev/null 2>&1)
check "a checkpoint directory takes the umask: 755 under 022, 700 under 077" \
    test "$(stat -c %a "$work/mode022") $(stat -c %a "$work/mode077")" = "755 700"
head -c 300 /dev/zero | tr '\0' a >"$work/short.txt"
expect 0 "warning: --data text:$work/short.txt holds 300 tokens, 9 sequences of --seq 32 (each 33 tokens with its last target), fewer than one --batch of 16" -- \
    train --data "text:$work/short.txt" --seq 32 --batch 16 --steps 1 --eval-samples 0
out=$("$usp" train --data "text:$work/short.txt" --seq 32 --batch 8 --steps 1 --eval-samples 0 2>&1)
check "no warning when the file holds a batch (9 sequences, --batch 8)" test "${out/warning/}" = "$out"

# The summary says which loss it is, what ran the numerics and what the modelled time covers
expect 0 "done: loss" -- train --steps 2 --seq 64 --batch 2 --eval-samples 2
expect 0 "(held-out), passkey accuracy" -- train --steps 2 --seq 64 --batch 2 --eval-samples 2
expect 0 "(step 2); 2 steps, " -- train --steps 2 --seq 64 --batch 2 --eval-samples 0
out=$("$usp" train --meta --model llama-1b --seq 4096 --world 8 --steps 2 --eval-samples 2 2>&1)
check "train --meta: no loss and no tokens/s of a CPU that ran no numerics; the steps' time apart from the evaluation's" \
    bash -c '[[ $1 == *"done: no loss (shapes only); 2 steps on shapes only"* && $1 != *"tokens/s on this CPU"* &&
                $1 == *"the steps would take "*", the held-out evaluation "*" s more"* ]]' _ "$out"
out=$("$usp" train --steps 2 --seq 64 --batch 2 --eval-samples 2 --json 2>&1 | tail -n 1)
check "the JSON summary has steps_time_s and loss_held_out" \
    bash -c '[[ $1 == *"\"steps_time_s\":"* && $1 == *"\"loss_held_out\":true"* ]]' _ "$out"

# A modelled run whose peak is over the modelled GPU's memory says so (text and JSON "fits")
expect 0 "does not fit: rank 0's peak, " -- train --meta --model llama-7b --seq 65536 --world 8 --steps 1 --eval-samples 0
out=$("$usp" train --meta --model llama-7b --seq 65536 --world 8 --steps 1 --eval-samples 0 --json 2>&1 | tail -n 1)
check "train --meta --json says fits: false" bash -c '[[ $1 == *"\"fits\":false"* ]]' _ "$out"
out=$("$usp" train --steps 1 --seq 64 --batch 2 --eval-samples 0 2>&1)
check "a run that fits says nothing of it" bash -c '[[ $1 == *"done: loss"* && $1 != *"does not fit"* ]]' _ "$out"

# Conveniences: --version says which commit was built, how and with which runtimes and compute backends; a
# mistyped option gets the one it most likely meant; a save and a resume say so
out=$("$usp" --version 2>&1)
check "usp --version names the commit, the build type, the compiler, the runtimes and the compute backends" \
    bash -c '[[ $1 =~ ^usp\ [0-9.]+\ \(commit\ [^,]+,\ [A-Za-z]+\ build,\ (gcc|clang)\ [^$'"'"'\n'"'"']+\)$'"'"'\n'"'"'runtimes:\ sim\ \(in\ this\ build\).*$'"'"'\n'"'"'compute\ backends:\ cpu ]]' _ "$out"
expect 2 "unknown option --step for \`usp train\`; did you mean --steps? see usp train --help" -- train --step 3
expect 2 "unknown option --frobnicate for \`usp train\`; see usp train --help" -- train --frobnicate
"$usp" train --steps 4 --until 2 --seq 64 --batch 2 --eval-samples 0 --save "$work/said" >"$work/said.txt" 2>&1
check "a save says where and at which step" grep -qx "usp train: saved to $work/said (step 2)" "$work/said.txt"
expect 0 "usp train: resumed from $work/said at step 2 of 4" -- train --steps 4 --seq 64 --batch 2 --eval-samples 0 \
    --resume "$work/said"

# Inputs that once passed silently or lost work: each is refused (exit 2) naming the value and what would work,
# or does what it says.
expect 2 "--inject swap:rank=2,op=any,call=3 fired but changed nothing (it exchanged two alike collectives" -- \
    train --steps 2 --seq 64 --batch 2 --eval-samples 0 --inject swap:rank=2,call=3
expect 2 "--warmup 100 is more than the 2 --steps: the learning rate would still be rising when the run ends, at 2% of --lr 0.01; give --warmup 2 or fewer" -- \
    train --warmup 100 --steps 2
expect 0 "done: loss" -- train --warmup 2 --steps 2 --seq 64 --batch 2 --eval-samples 0
expect 2 "--kv-heads 3 does not divide --heads 8; each key/value head serves a whole group of query heads (use a divisor of 8)" -- \
    selftest --heads 8 --kv-heads 3
expect 2 "--kv-heads 16 does not divide --heads 8" -- selftest --heads 8 --kv-heads 16
expect 0 "checks passed" -- selftest --heads 8 --kv-heads 4
"$usp" train --steps 1 --seq 64 --batch 2 --eval-samples 0 --save "$work/short_ckpt" >/dev/null 2>&1
expect 2 "usp eval --eval-samples 0: evaluating no sample measures nothing; give --eval-samples 1 or more" -- \
    eval --resume "$work/short_ckpt" --eval-samples 0
rm -rf "$work/short_ckpt"
# A checkpoint under the longest path a save takes (PATH_MAX 4096 less the 58 characters its temporary
# names add: 4037) saves and loads back; one character more is refused before step 1, leaving nothing.
# (Loading once read the path into 1024 bytes: a save of over 1000 characters could not be resumed.)
path_of_length() { # N: a path of exactly N characters under $work/long, its directories made
    local p=$work/long
    while ((${#p} + 201 < $1 - 20)); do p=$p/$(printf 'd%.0s' {1..200}); done
    mkdir -p "$p"
    local rest=$(($1 - ${#p} - 1))
    printf '%s/%s' "$p" "$(printf 'c%.0s' $(seq "$rest"))"
}
long=$(path_of_length 4037)
expect 0 "done: loss" -- train --steps 2 --seq 64 --batch 2 --eval-samples 0 --save "$long"
expect 0 "eval: loss" -- eval --resume "$long" --eval-samples 2
expect 0 "done: loss" -- train --steps 3 --seq 64 --batch 2 --eval-samples 0 --resume "$long"
rm -rf "$work/long"
too_long=$(path_of_length 4038)
expect 2 "the path is 4038 characters; with the 58 that usp adds to write it, it is over the 4096 of PATH_MAX" -- \
    train --steps 1 --seq 64 --batch 2 --eval-samples 0 --save "$too_long"
if [[ ! -e $too_long && -z $(find "$work/long" -type f) ]]; then passed=$((passed + 1)); else
    failed=$((failed + 1)); echo "FAIL: a refused --save left files"; fi
rm -rf "$work/long"

# SIGTERM at a random step (issue 29): the ranks stop after that whole step, save it and exit 143; --resume
# gives the uninterrupted run's losses exactly. The signal comes once the record of a random step in 2-150 is out.
losses_after() { sed -nE 's/^\{"step":([0-9]+),"loss":([^,]*),.*/\1 \2/p' | awk -v k="$1" '$1 > k'; }
run=(train --steps 600 --seq 64 --batch 2 --eval-samples 0 --log-every 1 --json)
whole=$("$usp" "${run[@]}" 2>&1)
"$usp" "${run[@]}" --save "$work/stopped" >"$work/stopped.out" 2>"$work/stopped.err" &
pid=$!
at=$((2 + RANDOM % 149))
for _ in $(seq 1 1200); do grep -q "\"step\":$at," "$work/stopped.out" && break; sleep 0.05; done
kill -TERM "$pid"
wait "$pid"
rc=$?
k=$(sed -nE 's/.*"step":([0-9]+),.*/\1/p' "$work/stopped.out" | tail -n 1)
saved=$(sed -nE 's/.*"step": ([0-9]+),.*/\1/p' "$work/stopped/usp_checkpoint.json" 2>/dev/null)
check "SIGTERM: exit 143 (got $rc), stopped after step $k of 600 and saved that step ($saved)" \
    test "$rc" -eq 143 -a -n "$k" -a "$k" = "$saved" -a "${k:-600}" -lt 600
check "SIGTERM: the message names the step and how to go on" \
    grep -q "stopped by SIGTERM after step $k of 600; saved to $work/stopped: go on with usp train --resume" \
    "$work/stopped.err"
resumed=$("$usp" "${run[@]}" --resume "$work/stopped" 2>&1)
check "SIGTERM then --resume: the losses of steps $((k + 1))-600 are the uninterrupted run's, bit for bit" \
    test -n "$(losses_after "$k" <<<"$whole")" -a "$(losses_after "$k" <<<"$whole")" = "$(losses_after "$k" <<<"$resumed")"
expect 2 "--save-every 5 without --save" -- train --steps 10 --save-every 5
# --save-every: a SIGKILL, which no process can catch, leaves the last periodic checkpoint, whole
"$usp" train --steps 100000 --seq 64 --batch 2 --eval-samples 0 --log-every 1 --json --save-every 3 \
    --save "$work/every" >"$work/every.out" 2>&1 &
pid=$!
for _ in $(seq 1 1200); do grep -q '"step":8,' "$work/every.out" && break; sleep 0.05; done
kill -KILL "$pid"
wait "$pid" 2>/dev/null
saved=$(sed -nE 's/.*"step": ([0-9]+),.*/\1/p' "$work/every/usp_checkpoint.json" 2>/dev/null)
check "--save-every 3, then SIGKILL after step 8: a checkpoint at a multiple of 3 (step ${saved:-none})" \
    test -n "$saved" -a "$((${saved:-1} % 3))" -eq 0 -a "${saved:-0}" -ge 6
expect 0 "eval: loss" -- eval --resume "$work/every" --seq 64 --batch 2 --eval-samples 2
# --keep 3: DIR is the newest, the two before it stay beside it as DIR-step-N, older ones go
"$usp" "${short[@]}" --steps 12 --save-every 3 --keep 3 --save "$work/kept" >/dev/null 2>&1
check "--save-every 3 --keep 3 over 12 steps: kept, kept-step-9 and kept-step-6, not kept-step-3" test \
    "$(ls -d "$work"/kept* | xargs -n 1 basename | tr '\n' ' ')" = "kept kept-step-6 kept-step-9 " \
    -a -n "$(grep '"step": 9,' "$work/kept-step-9/usp_checkpoint.json")"
expect 0 "eval: loss" -- eval --resume "$work/kept-step-6" --seq 64 --batch 2 --eval-samples 2
expect 2 "--keep 2 without --save: give --save DIR" -- train --steps 3 --keep 2

finish cli_inputs
