#!/usr/bin/env bash
# Command-line contract of `usp` (docs/CONTRACT.md): exit codes, messages that name
# the option, injected faults ending within 5 seconds with a report, identical traces.
# Usage: cli_test.sh PATH/TO/usp
set -u
usp=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0

# expect CODE NEEDLE -- ARGS...: runs usp ARGS (60 s at most, or $limit), checks
# the exit code and that NEEDLE appears in its output (stdout + stderr).
expect() {
    local code=$1 needle=$2
    shift 3
    local out rc
    out=$(timeout "${limit:-60}" "$usp" "$@" 2>&1)
    rc=$?
    if [[ $rc -eq $code && $out == *"$needle"* ]]; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAIL: usp $* -> exit $rc (expected $code), looked for '$needle' in:"
        echo "$out" | head -20 | sed 's/^/    /'
    fi
}

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
for field in '"step":' '"loss":' '"tokens_per_s":' '"sim_time_s":' '"wall_s":' '"peak_bytes":[' '"passkey_accuracy":'; do
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
check() { # check DESCRIPTION CONDITION...: counts a check that passes when the condition does
    local what=$1
    shift
    if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: $what"; fi
}
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
short=(train --steps 2 --seq 64 --batch 2 --eval-samples 0)
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
check "the InfiniBand arrows join the data-parallel partners" grep -q 'r0 -> r8 \[dir=both, color="#cc4125"' "$tr/traffic.dot"
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

# usp plan: the modelled step, its timeline for Perfetto
expect 0 "does not fit" -- plan --model llama-7b --seq 1048576 --world 8 --topology dgx-h100
expect 0 "would fit with --dtype bf16" -- plan --model llama-7b --seq 1048576 --world 8 --topology dgx-h100
# memory options: bad values name the option; bf16 needs shapes only
expect 2 "--dtype fp16: expected fp32 or bf16" -- plan --dtype fp16
expect 2 "--zero" -- train --zero 4 --steps 1
expect 2 "--dtype bf16 with the cpu backend" -- train --dtype bf16 --steps 1
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
one=(train --steps 1 --seq 64 --batch 2 --eval-samples 0)
expect 2 "--lr nan: the learning rate must be a finite number above 0" -- "${one[@]}" --lr nan
expect 2 "--lr inf: the learning rate must be" -- "${one[@]}" --lr inf
expect 2 "--lr -0.1: the learning rate must be" -- "${one[@]}" --lr -0.1
expect 2 "--lr 0: the learning rate must be" -- "${one[@]}" --lr 0
expect 2 "--backend foo: unknown backend; the backends are sim (in this build), nccl (" -- "${one[@]}" --backend foo
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
timeout 90 cat "$out_dir/pipe" >"$out_dir/from_pipe" &
reader=$!
expect 0 "done: loss" -- "${one[@]}" --trace "$out_dir/pipe"
check "--trace to a FIFO leaves a FIFO" test -p "$out_dir/pipe"
kill "$reader" 2>/dev/null
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
# issue 15: every rank's program runs in full, so a world past the planner's cap on rank-layers is refused at
# once, naming the largest world that runs (before: 88-140 s and 1.1 GB; after the O(W) collectives: 70 s)
limit=5 expect 2 "usp plan: --world 4096 x 32 layers (--model llama-7b) = 131072 rank-layers to simulate, more than the planner's 32768" -- \
    plan --world 4096 --ulysses 32 --model llama-7b --seq 8192
limit=5 expect 2 "use --world 1024 (DP 32 of U 32 x R 1)" -- plan --world 4096 --ulysses 32 --model llama-7b --seq 8192
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
expect 0 "usp train --backend mpi --timeout S --dump-dir DIR" -- postmortem --help
expect 2 "expected the directory of flight records first" -- postmortem
expect 2 "$work/nothing: cannot read this directory" -- postmortem "$work/nothing"
mkdir "$work/pm" && expect 2 "$work/pm: no flight records in it (files rank-<R>.usp-flight.json" -- postmortem "$work/pm"
expect 3 "wait chain: rank 0 waits in all_to_all #8 on ulysses[0] (core/parallel/ulysses.c:174) for rank 2; rank 2 waits in all_reduce #6 on world (core/train/train.c:71) for rank 0; a cycle" -- postmortem "$records"
expect 3 "  rank 2: blocked in all_reduce #6 on world (core/train/train.c:71) all_reduce(count=1, f64, sum), waiting for rank 0, 1, 3" -- postmortem "$records"
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
if command -v python3 >/dev/null; then
    "$usp" train --world 2 "${short[@]:1}" --trace "$cmp_dir/u.json" >/dev/null 2>&1
    check "plan --compare of a Ulysses sim trace: ratios of 1" test "$(sim_ratios "$cmp_dir/u.json" gemm attention all_to_all)" = ok
    "$usp" train --world 4 --ulysses 1 --ring 2 "${short[@]:1}" --trace "$cmp_dir/r.json" >/dev/null 2>&1
    check "plan --compare of a ring x DP sim trace: ratios of 1" test "$(sim_ratios "$cmp_dir/r.json" ring_p2p all_reduce)" = ok
fi
expect 0 "the run: step 2 of 2, modelled by the simulator on dgx-h100, mean of 2 ranks" -- plan --compare "$cmp_dir/u.json"
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

# Conveniences: --version says which commit was built, how and with which backends; a mistyped option gets the
# one it most likely meant; a save and a resume say so
out=$("$usp" --version 2>&1)
check "usp --version names the commit, the build type, the compiler and the backends" \
    bash -c '[[ $1 =~ ^usp\ [0-9.]+\ \(commit\ [^,]+,\ [A-Za-z]+\ build,\ (gcc|clang)\ [^$'"'"'\n'"'"']+\)$'"'"'\n'"'"'backends:\ sim\ \(in\ this\ build\) ]]' _ "$out"
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

echo "cli: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
