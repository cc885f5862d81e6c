#!/usr/bin/env bash
# Command-line contract of `usp` (docs/CONTRACT.md): exit codes, messages that name
# the option, injected faults ending within 5 seconds with a report, identical traces.
# Usage: cli_test.sh PATH/TO/usp
set -u
source "$(dirname "$0")/cli_lib.sh" "$1"

expect 0 "usp 0." -- --version
expect 0 "selftest" -- --help
expect 2 "usage" --
expect 2 "unknown command 'bogus'" -- bogus
expect 0 "--inject SPEC" -- selftest --help

# bad options: exit 2, the message names the option (and the value)
expect 2 "--world 0" -- selftest --world 0
expect 2 "--ulysses 3" -- selftest --world 8 --ulysses 3
expect 2 "unknown option --frobnicate" -- selftest --frobnicate
expect 2 "--world eight: not a whole number" -- selftest --world eight
expect 2 "--world needs a value" -- selftest --world
expect 2 "--ring 0" -- selftest --world 8 --ring 0
expect 2 "--inject bogus" -- selftest --inject bogus
expect 2 "--inject skip:rank=9: there are only 8 ranks" -- selftest --world 8 --inject skip:rank=9

# a clean run, plain and JSON
expect 0 "checks passed" -- selftest --world 8 --ulysses 4
expect 0 '"summary":true' -- selftest --world 8 --ulysses 2 --ring 2 --json

# every injection kind: exit 3 (4 for crash) within 5 s, with rank, op, group, seq, call site
limit=5
expect 3 "rank 2: skip at its call 1, all_to_all #1 on ulysses[0] (core/train/selftest.c:" -- selftest --world 8 --ulysses 4 --inject skip:rank=2
expect 3 "rank 2: swap at its call 1, all_to_all #1 on ulysses[0] (core/train/selftest.c:" -- selftest --world 8 --ulysses 4 --inject swap:rank=2
expect 3 "rank 2 calls all_to_all(count=2047, f32) as its call #1 (collective #1) on ulysses[0] at core/train/selftest.c:" -- selftest --world 8 --ulysses 4 --inject size:rank=2
expect 3 "rank 2 waits in all_to_all #5 on world (core/train/selftest.c:" -- selftest --world 8 --ulysses 4 --inject group:rank=2
expect 4 "rank 2 crashed (injected) at its call 1: all_to_all #1 on ulysses[0] (core/train/selftest.c:" -- selftest --world 8 --ulysses 4 --inject crash:rank=2
expect 3 "deadlock" -- selftest --world 8 --ulysses 2 --ring 2 --inject skip:rank=1,op=sendrecv,call=2
unset limit

# traces: two runs are byte-identical; an unwritable path is refused before the run (exit 2), no file left
"$usp" selftest --world 8 --ulysses 2 --ring 2 --trace "$work/a.txt" >/dev/null 2>&1
"$usp" selftest --world 8 --ulysses 2 --ring 2 --trace "$work/b.txt" >/dev/null 2>&1
if [[ -s $work/a.txt ]] && cmp -s "$work/a.txt" "$work/b.txt"; then passed=$((passed + 1)); else
    failed=$((failed + 1)); echo "FAIL: two selftest traces differ or are empty"; fi
expect 2 "--trace $work/missing/t.txt: the directory $work/missing does not exist" -- selftest --trace "$work/missing/t.txt"
if [[ $(ls "$work") == $'a.txt\nb.txt' ]]; then passed=$((passed + 1)); else
    failed=$((failed + 1)); echo "FAIL: stray files left: $(ls "$work")"; fi

# usp train / eval: short runs, the JSON contract, bad options and files
expect 0 '"summary":true' -- train --steps 3 --seq 64 --batch 2 --eval-samples 2 --json
out=$(timeout 60 "$usp" train --steps 3 --seq 64 --batch 2 --eval-samples 2 --json 2>&1)
for field in '"step":' '"loss":' '"tokens_per_s":' '"clock_s":' '"clock_step_s":' '"clock":"modelled"' '"sim_time_s":' '"wall_s":' '"peak_bytes":[' '"passkey_accuracy":'; do
    if [[ $out == *"$field"* ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: train --json lacks $field"; fi
done
expect 0 "passkey accuracy" -- train --steps 2 --seq 64 --batch 2 --eval-samples 2 --world 4 --ulysses 2 --ring 2
expect 0 "done: loss" -- train --steps 2 --seq 64 --batch 2 --eval-samples 0 --attention local
expect 2 "--seq 102 does not divide" -- train --steps 1 --seq 102 --world 4 --ulysses 4
expect 0 "done: loss" -- train --steps 1 --seq 102 --world 4 --ulysses 4 --pad --batch 1 --eval-samples 0
expect 2 "--ulysses 8 is larger than the 4 heads" -- train --steps 1 --seq 64 --world 8 --ulysses 8
expect 2 "--batch 3 is not a multiple of the 2 data-parallel replicas" -- train --steps 1 --seq 64 --world 4 --ulysses 2 --batch 3
expect 2 "--model nosuch" -- train --model nosuch
expect 2 "--backend nccl" -- train --backend nccl
# --gpus counts GPUs of --backend nccl, one rank each: with another backend, or beside a different --world, it is refused
expect 2 "--gpus 2 with --backend sim" -- train --gpus 2
expect 2 "--gpus 2 with --world 4" -- train --backend nccl --gpus 2 --world 4
# The nccl runtime (USP_TEST_NCCL=ON: a build with NCCL and Open MPI) looks for the GPU before
# anything else: on a machine without one, --gpus 2 is exit 2 naming the missing device, with or
# without a launcher, and without one before it starts any process (no launch line); on a machine
# with GPUs, more than it has is exit 2 naming the count, before it starts any process either.
if [[ ${USP_TEST_NCCL:-OFF} == ON ]]; then
    if ! nvidia-smi -L >/dev/null 2>&1; then
        out=$(timeout 60 "$usp" train --backend nccl --gpus 2 --steps 1 2>&1)
        rc=$?
        if [[ $rc -eq 2 && $out == *"--backend nccl --gpus 2: no NVIDIA GPU here (CUDA says: "* &&
            $out != *"usp: launching"* ]]; then
            passed=$((passed + 1))
        else
            failed=$((failed + 1))
            echo "FAIL: usp train --backend nccl --gpus 2 without a GPU -> exit $rc (expected 2 naming the device):"
            echo "$out" | head -20 | sed 's/^/    /'
        fi
        if command -v mpirun >/dev/null; then
            out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 60 mpirun --oversubscribe -np 2 \
                "$usp" train --backend nccl --steps 1 2>&1)
            rc=$?
            if [[ $rc -eq 2 && $out == *"--backend nccl --gpus 2: no NVIDIA GPU here"* ]]; then
                passed=$((passed + 1))
            else
                failed=$((failed + 1))
                echo "FAIL: mpirun -np 2 usp train --backend nccl -> exit $rc (expected 2 naming the device):"
                echo "$out" | head -20 | sed 's/^/    /'
            fi
        fi
    else
        gpus=$(nvidia-smi -L | grep -c '^GPU ')
        expect 2 "--backend nccl --gpus $((gpus + 1)): this machine has $gpus GPU" -- train --backend nccl \
            --gpus $((gpus + 1)) --steps 1
    fi
fi
expect 2 "--attention everywhere" -- train --attention everywhere
expect 2 "--data bogus" -- train --data bogus --steps 1
expect 2 "needs --resume" -- eval
printf 'not a safetensors file' > "$work/bad.safetensors"
mkdir -p "$work/ckpt"
"$usp" train --steps 2 --seq 64 --batch 2 --eval-samples 0 --save "$work/ckpt" >/dev/null 2>&1
expect 0 "eval: loss" -- eval --resume "$work/ckpt" --seq 64 --batch 2 --eval-samples 4
cp "$work/bad.safetensors" "$work/ckpt/model.safetensors"
expect 2 "$work/ckpt/model.safetensors" -- eval --resume "$work/ckpt" --seq 64 --batch 2 --eval-samples 4

# usp viz and the pictures of selftest: options, formats, whole files, the wait-for picture
export LSAN_OPTIONS="suppressions=$(cd "$(dirname "$0")/.." && pwd)/viz/graphviz_lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
vz=$work/viz
mkdir -p "$vz"
# eval has its own options: a training option is refused by name, nothing is written, and its summary counts
# samples, not steps
"$usp" train --steps 2 --seq 64 --batch 2 --eval-samples 0 --save "$work/eval_ckpt" >/dev/null 2>&1
for opt in "--steps 3" "--save $work/evalcopy" "--lr 5" "--until 2" "--warmup 1" "--log-every 1"; do
    expect 2 "${opt%% *} is an option of usp train: usp eval runs no training step and writes nothing" -- \
        eval --resume "$work/eval_ckpt" --seq 64 --batch 2 --eval-samples 4 $opt
done
check "a refused eval --save writes nothing" test ! -e "$work/evalcopy"
out=$("$usp" eval --help 2>&1)
check "usp eval --help lists eval's options, not train's" \
    bash -c '[[ $1 == *"--eval-samples"* && $1 != *"--steps"* && $1 != *"--save"* && $1 != *"--lr"* ]]' _ "$out"
expect 0 "on 4 held-out samples of the checkpoint at step" -- eval --resume "$work/eval_ckpt" --seq 64 --batch 2 --eval-samples 4
expect 0 "viz        draw the schedule" -- --help
expect 0 "--picture WHAT" -- viz --help
expect 2 "nothing to write" -- viz --ulysses 4
expect 2 "--dot $vz/a.jpg: unknown diagram format '.jpg'" -- viz --ulysses 4 --dot "$vz/a.jpg"
expect 2 "--picture bogus" -- viz --ulysses 4 --dot "$vz/a.dot" --picture bogus
expect 2 "--picture ring needs --ring 2" -- viz --ulysses 4 --dot "$vz/a.dot" --picture ring
expect 2 "--seq 15 does not divide" -- viz --ulysses 4 --seq 15 --dot "$vz/a.dot"
expect 2 "--kv-heads 3" -- viz --ulysses 4 --heads 8 --kv-heads 3 --dot "$vz/a.dot"
expect 2 "--dot $vz/a.gif" -- selftest --world 4 --dot "$vz/a.gif"
check "bad options leave no file" test -z "$(ls "$vz")"
expect 0 "ulysses picture in $vz/a.dot" -- viz --ulysses 4 --seq 16 --heads 8 --dot "$vz/a.dot"
"$usp" viz --ulysses 4 --seq 16 --heads 8 --dot "$vz/b.dot" >/dev/null 2>&1
check "two viz runs write byte-identical DOT" cmp -s "$vz/a.dot" "$vz/b.dot"
expect 0 "trace in $vz/r.json" -- viz --ring 4 --seq 16 --heads 8 --causal --dot "$vz/r.dot" --trace "$vz/r.json"
check "viz --trace .json writes Chrome trace JSON" grep -q '^{"traceEvents":\[' "$vz/r.json"
check "the ring picture shows skipped blocks" grep -q 'skipped' "$vz/r.dot"
expect 3 "deadlock" -- selftest --world 8 --ulysses 4 --inject group:rank=2 --dot "$vz/dl.dot"
check "the wait-for picture highlights the cycle" grep -q 'rank 2 (in the cycle)' "$vz/dl.dot"
expect 4 "crashed" -- selftest --world 8 --ulysses 4 --inject crash:rank=2 --dot "$vz/crash.dot"
check "the wait-for picture names the crashed rank" grep -q 'rank 2: CRASHED (others wait for it)' "$vz/crash.dot"
expect 0 "checks passed" -- selftest --world 8 --ulysses 2 --ring 2 --dot "$vz/traffic.dot" --trace "$vz/st.json"
check "selftest --dot on success draws the traffic map" grep -q 'Traffic map' "$vz/traffic.dot"
check "selftest --trace .json writes Chrome trace JSON" grep -q '"ph":"B"' "$vz/st.json"
if "$usp" viz --ulysses 2 --seq 8 --heads 2 --dot "$vz/probe.png" >/dev/null 2>&1; then # built with Graphviz
    expect 0 "hybrid picture in $vz/h.svg" -- viz --ulysses 2 --ring 2 --seq 16 --heads 8 --dot "$vz/h.svg"
    check "SVG output" grep -q '<svg' "$vz/h.svg"
    check "PNG output" test "$(head -c 4 "$vz/probe.png" | od -An -c | tr -d ' ')" = '211PNG'
    expect 3 "deadlock" -- selftest --world 8 --ulysses 4 --inject group:rank=2 --dot "$vz/dl.pdf"
    check "PDF output" test "$(head -c 5 "$vz/dl.pdf")" = '%PDF-'
else
    expect 2 "built without Graphviz" -- viz --ulysses 2 --seq 8 --heads 2 --dot "$vz/probe.png"
fi
check "no temporary files left beside the pictures" test -z "$(ls "$vz" | grep '\.tmp\.')"

# usp train --trace / --dot: the Chrome trace, the traffic map coloured by link, the wait-for picture of a fault
# (60 s each: a training run on 2 busy cores can take seconds; selftest above checks that faults end fast)
tr=$work/train
mkdir -p "$tr"
limit=60
expect 2 "--dot $tr/a.gif: unknown diagram format '.gif'" -- "${short[@]}" --dot "$tr/a.gif"
check "train: a bad --dot leaves no file" test -z "$(ls "$tr")"
expect 0 "trace in $tr/t.json" -- "${short[@]}" --trace "$tr/t.json"
check "train --trace .json writes Chrome trace JSON" grep -q '^{"traceEvents":\[' "$tr/t.json"
check "the training trace has a compute track" grep -q '"ph":"B",.*"pid":3,"tid":0' "$tr/t.json"
check "the training trace has a communication track" grep -q '"ph":"B","name":"all_to_all #1 on ulysses\[0\]",.*"pid":3,"tid":1' "$tr/t.json"
if command -v python3 >/dev/null; then
    check "the training trace parses as JSON" python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$tr/t.json"
fi
expect 0 "trace in $tr/t.txt" -- "${short[@]}" --trace "$tr/t.txt"
check "train --trace of another name writes the plain-text trace" grep -q '^# usp trace' "$tr/t.txt"
expect 0 '"summary":true' -- "${short[@]}" --trace "$tr/j.json" --json
check "train --json prints JSON records only, the trace goes to its file" \
    test -z "$(timeout 60 "$usp" "${short[@]}" --json --trace "$tr/j.json" | grep -v '^{')"
out=$(timeout 60 "$usp" train --steps 1 --seq 64 --batch 2 --eval-samples 0 --world 16 --ulysses 4 --ring 2 \
      --dot "$tr/traffic.dot" 2>&1)
check "train --dot on 2 nodes says where the traffic map is" test "${out##*$'\n'}" = "usp train: traffic map in $tr/traffic.dot"
check "the traffic map of training is coloured by link" grep -q 'crosses: green NVLink, red InfiniBand' "$tr/traffic.dot"
# the gradients' all-reduce is one ring through all 16 ranks (core/model/grad_buckets.h): it crosses between the
# nodes at 7 -> 8 and 15 -> 0, and nothing else does
check "the InfiniBand arrows are where the world's ring crosses the nodes" \
    test "$(grep -c 'color="#cc4125"' "$tr/traffic.dot")" = 2 -a \
    -n "$(grep 'r7 -> r8 \[color="#cc4125"' "$tr/traffic.dot")"
expect 0 "traffic map in $tr/pcie.dot" -- "${short[@]}" --world 8 --ulysses 4 --ring 2 --batch 1 --topology pcie-gen4 \
    --dot "$tr/pcie.dot"
check "a PCIe box colours the arrows across CPU sockets apart" grep -q 'blue PCIe, purple PCIe across CPU sockets' "$tr/pcie.dot"
expect 3 "wait-for picture in $tr/dl.dot" -- "${short[@]}" --inject group:rank=2 --dot "$tr/dl.dot" --trace "$tr/dl.json"
check "train's wait-for picture highlights the cycle" grep -q 'rank 2 (in the cycle)' "$tr/dl.dot"
check "train's wait-for picture names the training code" grep -q 'at core/train/train.c:' "$tr/dl.dot"
check "a failed training run still writes its whole trace" grep -q '\]\,"displayTimeUnit"' "$tr/dl.json"
expect 4 "crashed" -- "${short[@]}" --inject crash:rank=1 --dot "$tr/crash.dot"
check "train's wait-for picture names the crashed rank" grep -q 'rank 1: CRASHED (others wait for it)' "$tr/crash.dot"
expect 2 "--dot $tr/missing/t.dot: the directory $tr/missing does not exist" -- "${short[@]}" --dot "$tr/missing/t.dot"
if [[ -s $vz/probe.png ]]; then # built with Graphviz
    expect 0 "traffic map in $tr/traffic.svg" -- "${short[@]}" --dot "$tr/traffic.svg"
    check "train --dot .svg renders" grep -q '<svg' "$tr/traffic.svg"
    expect 3 "deadlock" -- "${short[@]}" --inject skip:rank=2 --dot "$tr/dl.png"
    check "train's wait-for picture as PNG" test "$(head -c 4 "$tr/dl.png" | od -An -c | tr -d ' ')" = '211PNG'
fi
unset limit
check "train leaves no temporary or stray files" test -z "$(ls "$tr" | grep -v -x -E '(t|j|dl)\.json|t\.txt|(traffic|pcie|dl|crash)\.dot|traffic\.svg|dl\.png')"

# --sim-compute: the simulated ranks' backend (cpu, lazy; cuda in a CUDA build); what cannot apply is exit 2 naming it
expect 0 "loss" -- "${one[@]}" --sim-compute cpu
# lazy: the cpu kernels late, the stream order checked; the hybrid with both overlaps on gives the cpu's loss
hybrid=(train --world 4 --ulysses 2 --ring 2 --ring-overlap on --zero 3 --steps 3 --log-every 3 --eval-samples 0)
cpu_loss=$("$usp" "${hybrid[@]}" | sed -n 's/^\(done: loss [^;]*\);.*/\1/p')
expect 0 "$cpu_loss" -- "${hybrid[@]}" --sim-compute lazy
expect 2 "--sim-compute tpu: unknown compute backend; the compute backends are cpu (default), lazy" -- "${one[@]}" --sim-compute tpu
expect 2 "--sim-compute meta: a run on shapes only is --meta" -- "${one[@]}" --sim-compute meta
expect 2 "--sim-compute cuda with --backend mpi" -- "${one[@]}" --sim-compute cuda --backend mpi
expect 2 "--sim-compute cpu with --meta" -- "${one[@]}" --sim-compute cpu --meta
expect 0 "--sim-compute cpu|lazy|cuda" -- train --help
# usp plan: the modelled step, its timeline for Perfetto
expect 0 "does not fit" -- plan --model llama-7b --seq 1048576 --world 8 --topology dgx-h100
expect 0 "would fit with --dtype bf16" -- plan --model llama-7b --seq 1048576 --world 8 --topology dgx-h100
# help wraps to the terminal ($COLUMNS here, a pipe being none): no line over 60 columns but the usage line;
# without a width, an option a line as written, for grep
long=$(COLUMNS=60 "$usp" plan --help | awk 'NR > 1 && length($0) > 60' | wc -l)
flat=$("$usp" plan --help | grep -c -- '--attention-kernel fa2|fa3|sdpa attention kernel whose published rates the model charges')
if [[ $long -eq 0 && $flat -eq 1 ]]; then passed=$((passed + 1)); else
    failed=$((failed + 1)); echo "FAIL: plan --help: $long lines over 60 columns at COLUMNS=60, $flat unwrapped"; fi
# --require-fit: exit 5 after the whole report when the step (with --sweep: every split) does not fit; 0 when it fits
expect 5 "--require-fit: the step does not fit (exit 5)" -- plan --model llama-7b --seq 1048576 --world 8 --require-fit
expect 5 "would fit with --dtype bf16" -- plan --model llama-7b --seq 1048576 --world 8 --require-fit
expect 5 "does not fit with any split" -- plan --model llama-7b --seq 65536 --world 8 --sweep --require-fit --json
expect 0 "fits: " -- plan --model llama-7b --seq 1048576 --world 8 --require-fit --dtype bf16 --tiled-loss --zero 3 \
    --tiled-mlp --recompute
expect 0 "fits: " -- plan --require-fit
expect 2 "--require-fit with --compare" -- plan --compare "$work/none.json" --require-fit
# memory options: bad values name the option; bf16 computes on the cpu backend too
expect 2 "--dtype fp16: expected fp32 or bf16" -- plan --dtype fp16
expect 2 "--zero" -- train --zero 4 --steps 1
expect 0 "done: loss" -- train --dtype bf16 --steps 2 --eval-samples 0
expect 2 "--grad-reduce bf16 with --dtype fp32" -- train --grad-reduce bf16 --steps 1
expect 2 "--grad-reduce fp16: expected fp32 or bf16" -- train --dtype bf16 --grad-reduce fp16 --steps 1
expect 0 "done: loss" -- train --dtype bf16 --grad-reduce bf16 --world 4 --ulysses 2 --steps 2 --eval-samples 0
expect 0 "storage bf16 (fp32 master weights and Adam state), ZeRO 3, recomputed layers, tiled MLP, tiled loss" -- \
    plan --dtype bf16 --zero 3 --recompute --tiled-mlp --tiled-loss --tile-rows 100
expect 0 "done" -- train --meta --dtype bf16 --zero 2 --steps 2 --eval-samples 0
# a model too big for this machine's memory: a clean exit 1 that points to planning, not the kernel's OOM killer
USP_CPU_MEMORY_LIMIT=3000000 expect 1 "planned on shapes only (usp plan, or usp train --meta)" -- train --steps 1
expect 0 "planned in" -- plan --seq 4096 --world 4 --trace "$work/plan.json"
if [[ -s $work/plan.json ]] && grep -q '"ph"' "$work/plan.json"; then passed=$((passed + 1)); else
    failed=$((failed + 1)); echo "FAIL: usp plan --trace wrote no Chrome trace"; fi
rm -f "$work/plan.json"

expect 2 "never fired" -- selftest --world 8 --ulysses 4 --inject skip:rank=0,op=sendrecv

# faults that could not change the run are usage errors, not a pass (issue 15, class 7)
limit=5
expect 2 "--inject size:rank=2,op=barrier: a barrier has no count" -- selftest --world 8 --ulysses 4 --inject size:rank=2,op=barrier
expect 2 "--inject swap:rank=1,op=sendrecv: swap reorders collectives" -- selftest --world 8 --ulysses 2 --ring 2 --inject swap:rank=1,op=sendrecv
expect 2 "--inject swap:rank=0,op=send: swap reorders collectives" -- selftest --world 8 --ulysses 4 --inject swap:rank=0,op=send
expect 2 "--inject group:rank=2,group=foo: group= names no group of the mesh" -- selftest --world 8 --ulysses 4 --inject group:rank=2,group=foo
expect 2 "--inject group:rank=2,op=all_to_all,group=ulysses: the op already runs on that group kind" -- selftest --world 8 --ulysses 4 --inject group:rank=2,op=all_to_all,group=ulysses
expect 2 "group=ulysses[1] fired but changed nothing (the rank is in no other group of that name)" -- selftest --world 8 --ulysses 4 --inject 'group:rank=2,group=ulysses[1]'
expect 3 "rank 2 waits in all_reduce #9 on ulysses[0]" -- selftest --world 8 --ulysses 4 --inject 'group:rank=2,op=all_reduce,group=ulysses[0]'
unset limit

# training options checked before step 1, naming the option and the value (issue 15, class 9)
expect 2 "--lr nan: the learning rate must be a finite number above 0" -- "${one[@]}" --lr nan
expect 2 "--lr inf: the learning rate must be" -- "${one[@]}" --lr inf
expect 2 "--lr -0.1: the learning rate must be" -- "${one[@]}" --lr -0.1
expect 2 "--lr 0: the learning rate must be" -- "${one[@]}" --lr 0
expect 2 "--backend foo: unknown runtime; the runtimes (where the ranks run) are sim (in this build), nccl (" -- "${one[@]}" --backend foo
out_dir=$work/outputs
mkdir -p "$out_dir"
printf 'x' > "$out_dir/file"
expect 2 "--save $out_dir/file: exists and is not a directory" -- "${one[@]}" --save "$out_dir/file"
expect 2 "--save $out_dir/missing/ck: the directory $out_dir/missing does not exist" -- "${one[@]}" --save "$out_dir/missing/ck"
expect 2 "--trace $out_dir/missing/t.json: the directory $out_dir/missing does not exist" -- "${one[@]}" --trace "$out_dir/missing/t.json"
expect 2 "--trace $out_dir: is a directory" -- "${one[@]}" --trace "$out_dir"
expect 2 "--dot $out_dir/file/t.dot: $out_dir/file is not a directory" -- "${one[@]}" --dot "$out_dir/file/t.dot"
check "refused outputs leave no file" test "$(ls "$out_dir")" = file
expect 0 "done: loss" -- "${one[@]}" --save "$out_dir/ck"
check "--save into an existing parent writes the checkpoint" test -s "$out_dir/ck/model.safetensors"
# USP_CPU_MEMORY_LIMIT: digits with K/M/G/T (powers of 1024); anything else is named
USP_CPU_MEMORY_LIMIT=1e9 expect 2 "USP_CPU_MEMORY_LIMIT=1e9: not a memory size" -- "${one[@]}"
USP_CPU_MEMORY_LIMIT=-1 expect 2 "USP_CPU_MEMORY_LIMIT=-1: not a memory size" -- "${one[@]}"
USP_CPU_MEMORY_LIMIT=1.5G expect 2 "USP_CPU_MEMORY_LIMIT=1.5G: not a memory size" -- "${one[@]}"
USP_CPU_MEMORY_LIMIT=10G expect 0 "done: loss" -- "${one[@]}"
USP_CPU_MEMORY_LIMIT=2M expect 1 "more than the 2.1 MB of USP_CPU_MEMORY_LIMIT" -- "${one[@]}"
# a write error on stdout is a failed command (exit 1, with a message), not exit 0
for args in "plan --json" "--version" "selftest --world 4"; do
    # shellcheck disable=SC2086 # the words of $args are the arguments
    timeout 60 "$usp" $args > /dev/full 2> "$work/full.err"
    rc=$?
    if [[ $rc -eq 1 ]] && grep -q "could not write the output to stdout" "$work/full.err"; then passed=$((passed + 1)); else
        failed=$((failed + 1)); echo "FAIL: usp $args > /dev/full -> exit $rc (expected 1): $(head -3 "$work/full.err")"; fi
done
# absurd numbers and keys given twice in a topology file (issue 15): exit 2 naming the field and its range,
# quickly (a 5e-324 GB/s link once made plan spin until killed, 1e-315 made --json print nothing and exit 0)
topology_with_bandwidth() {
    printf '{"gpu": "h100-sxm", "gpus_per_node": 8,\n "fabric": {"kind": "nvswitch", "gpu_link": {%s}}}\n' "$1"
}
topology_with_bandwidth '"bandwidth_gbs": 5e-324' >"$work/denormal.json"
topology_with_bandwidth '"bandwidth_gbs": 1e-315' >"$work/tiny.json"
topology_with_bandwidth '"bandwidth_gbs": 450, "bandwidth_gbs": 1' >"$work/twice.json"
limit=10
expect 2 "topology file $work/denormal.json: field 'fabric.gpu_link.bandwidth_gbs' is 4.94066e-324: it must be at least 0.001 and at most 100000" -- \
    plan --topology "$work/denormal.json"
expect 2 "field 'fabric.gpu_link.bandwidth_gbs' is 1e-315: it must be at least 0.001 and at most 100000" -- \
    plan --topology "$work/tiny.json" --json
expect 2 "topology file $work/twice.json: duplicate object key near '\"bandwidth_gbs\"' (line 2" -- \
    plan --topology "$work/twice.json"
unset limit
rm -f "$work/denormal.json" "$work/tiny.json" "$work/twice.json"

finish cli
