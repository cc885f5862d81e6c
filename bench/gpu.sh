#!/usr/bin/env bash
# The cuda backend on one GPU, in one script (steps 1-4 took under 8 minutes on an H100/H200; 3b, 3c, 4b not timed yet):
#   bench/gpu.sh [--only STEPS] [BUILD_DIR]   (default build/gpu; needs nvcc, cuBLAS and a GPU)
#   bench/gpu.sh --build-only [BUILD_DIR]      step 1 alone, no GPU needed (CI runs it wherever nvcc is)
#   bench/gpu.sh --prebuilt [--only STEPS] DIR  the binaries in DIR, built on another machine (a GPU machine
#                                              without the Debian libraries: DIR/tools/usp, tests/test_backend_conformance,
#                                              tests/test_cuda_attention_mma, tests/test_sim_staged, bench/gpu); no step 1
#   --only STEPS: a comma-separated list of the steps below to run (e.g. 3b,4b), the others skipped; each step
#   prints the seconds since the start, so a GPU lent for minutes can be spent on the steps that are due
#   (with commands of at most 10 minutes: --only 2,2b,3,3b,3c, then --only 4,4b).
# 1. builds usp with the cuda backend (Release, sm_90 unless CMAKE_CUDA_ARCHITECTURES is set), and
#    prints ptxas' registers and spills of the tensor-core attention kernels (issue 27: none spill);
# 2. the op-conformance table on cuda: every slot against the cpu backend, fp32 within the
#    table's tolerances, bf16 cases within their stated bounds (tests/conformance_bf16.c); then the
#    tensor-core attention against the cpu attention, and two runs bit for bit
#    (tests/test_cuda_attention_mma.c, the tolerances of tests/mma_attention_cases.h);
# 3. trains the default passkey task on one GPU (usp train --backend nccl --gpus 1) and
#    prints its accuracy (the goal: 100%);
# 3b. many simulated ranks on the one GPU (issue 26, item 7: usp train --backend sim --sim-compute cuda):
#    U4, R4, U2 x R2 and DP2 x U2 at ZeRO 3, 20 steps each, every step's loss against the cpu
#    simulator's (the goal: worst relative difference under 1e-5); then tests/test_sim_staged with
#    every rank on cuda (each collective kind against its reference, the meshes' losses within 1e-5);
# 3c. bf16 on the GPU against bf16 on the cpu simulator (issue 25, item 5): tiny at 1024 tokens and
#    gpt2-124m at 256, one sequence, 10 steps each, every step's loss (the goal: the first within
#    1e-4 relative, as one rank against a mesh in tests/test_train_bf16.c; every one within 1e-2,
#    the tolerance there after 10 steps of two bf16 runs whose fp32 sums are ordered differently);
# 4. the peer, then usp, on the same GPU in the same run: bench/gpu_peer.py (PyTorch, where torch
#    imports: cuBLAS GEMM, SDPA forward/backward, a Hugging Face Llama at llama-1b's shape trained
#    with bf16 autocast over fp32 master weights; what it cannot run it skips, saying why), then
#    bench/gpu --peer: cuBLAS fp32/bf16 TFLOP/s, flash attention forward/backward TFLOP/s (bf16,
#    causal, head_dim 128, N 16384 and 65536) beside the GEMM, llama-1b at N 8192 and 32768:
#    tokens/s, MFU, seconds to step 1; each beside PyTorch's figure as a ratio.
# 4b. the calibration loop on the one GPU (issue 28): usp calibrate --backend nccl (every kernel class over
#    shapes, cold and hot, the cache the GPU's L2), then tiny at 16384 tokens, gpt2-124m at 1024 x 8 and
#    llama-1b at 8192 (bf16), 6 steps each traced, each usp plan --compare --compare-steps 5 against the
#    file, phase by phase and op by op (the goal: step within 15%, each compute phase within 25%);
# With more than one GPU (issue 13), also:
# 5. usp train --backend nccl --gpus N (usp starts its N processes under mpirun) on the passkey
#    task against the simulator's losses on the same mesh (fp32: within 1e-3 of each), a Ulysses,
#    a ring and a DP 2 mesh, the last with one gradient bucket per layer (issue 26's overlap); then
#    the safety net: a call stalled on rank 1 ends the job (exit 3) with every rank's flight record,
#    and usp postmortem names the call that rank 1 never started;
# 6. usp calibrate --backend nccl: all_to_all / all_reduce / sendrecv busbw (compare with the
#    nccl-tests figures for the machine) and the kernels, written to a topology file;
# 7. a Ulysses and a ring mesh trained with --trace, then usp plan --compare with the calibrated
#    file: predicted against measured, phase by phase (the goal: step within 15%).
# Figures are printed, never asserted (the losses and the tests excepted). A step that fails is
# reported and the next one runs (a GPU lent for minutes is not spent on one failure); the script
# exits 1 at the end when any step failed, naming them.
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { echo "usage: bench/gpu.sh [--build-only | --prebuilt] [--only STEPS] [BUILD_DIR]" >&2; exit 2; }
build_only=0 prebuilt=0 only=
while [[ ${1:-} == --* ]]; do
    case $1 in
        --build-only) build_only=1 ;;
        --prebuilt) prebuilt=1 ;;
        --only) only=${2:?--only needs a list of steps, e.g. 3b,4b}; shift ;;
        *) echo "bench/gpu.sh: unknown option $1" >&2; usage ;;
    esac
    shift
done
(( $# <= 1 )) || usage
build=${1:-build/gpu}
steps="1 2 2b 3 3b 3c 4 4b 5 6 7"
for s in ${only//,/ }; do
    [[ " $steps " == *" $s "* ]] || { echo "bench/gpu.sh: --only $only: no step $s (steps: ${steps// /, })" >&2; exit 2; }
done
t0=$SECONDS
# step S runs: announced with its title and the seconds so far
step() {
    [[ -z $only || ",$only," == *",$1,"* ]] || return 1
    echo "== $1. $2 (at $((SECONDS - t0)) s)"
}
failed=()
# run S TITLE FUNCTION: step S, when it is to run, in a subshell that stops at its first failure; a failure is
# reported and counted, and the script goes on
run() {
    step "$1" "$2" || return 0
    set +e
    (set -e; "$3")
    local rc=$?
    set -e
    ((rc == 0)) || { echo "== $1: FAILED (exit $rc)"; failed+=("$1"); }
}
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
gpus=${gpus:-0}
if ((prebuilt)); then
    for b in tools/usp tests/test_backend_conformance tests/test_cuda_attention_mma tests/test_sim_staged bench/gpu; do
        [[ -x $build/$b ]] || { echo "bench/gpu.sh --prebuilt: $build/$b is not an executable" >&2; exit 2; }
    done
    echo "== 1. prebuilt binaries in $build (not built here)"
elif step 1 "build ($build)" || ((build_only)); then
    mpi=OFF
    (( gpus > 1 )) && mpi=ON # several GPUs are launched under mpirun
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DUSP_WITH_CUDA=ON -DUSP_WITH_MPI=$mpi >/dev/null
    cmake --build "$build" -j"$(nproc)" --target usp test_backend_conformance test_cuda_attention_mma test_sim_staged \
        bench_gpu >"$build/build.log" 2>&1 || { tail -40 "$build/build.log"; exit 1; }
    echo "built in $((SECONDS - t0)) s"
    # ptxas -v of the tensor-core attention (a file compiled again only when it changed: the lines are kept)
    if grep -q "ptxas info.*attention_mma\|ptxas info.*mma_" "$build/build.log"; then
        grep -A3 "Compiling entry function.*mma" "$build/build.log" | grep -E "entry function|Used [0-9]+ registers|spill" |
            sed -E "s/.*entry function '([^']*)'.*/\1:/; s/^ptxas info +: +/    /" >"$build/ptxas.txt"
    fi
    [[ -s $build/ptxas.txt ]] && { echo "tensor-core attention, ptxas for sm_90:"; cat "$build/ptxas.txt"; }
fi
if ((build_only)); then
    exit 0
fi
conformance() { CK_FORK=no "$build/tests/test_backend_conformance" --backend cuda; }
tensor_core_attention() { CK_FORK=no "$build/tests/test_cuda_attention_mma"; }
passkey() { "$build/tools/usp" train --backend nccl --gpus 1; }
# every step's loss of usp train ARGS..., one a line
losses() { "$build/tools/usp" train "$@" --log-every 1 --eval-samples 0 --json | grep -v '"summary"' |
    grep -o '"loss":[^,}]*' | cut -d: -f2; }
# NAME N FIRST ALL: two columns of N losses (reference, other) on standard input; fails unless N lines have both,
# the first within FIRST relative and every one within ALL
same_losses() {
    awk -v name="$1" -v want="$2" -v first="$3" -v all="$4" '
        NF == 2 { d = ($1 - $2) / $1; if (d < 0) d = -d; if (n == 0) d1 = d; if (d > worst) worst = d; n++ }
        END { printf "%s: %d losses, |reference - other| / reference: first %.2e, worst %.2e\n", name, n, d1, worst
              exit !(n == want && d1 <= first && worst <= all) }'
}
simulated_ranks() {
    for mesh in "--ulysses 4" "--ring 4" "--ulysses 2 --ring 2" "--ulysses 2"; do
        paste <(losses $mesh --world 4 --zero 3 --steps 20) <(losses $mesh --world 4 --zero 3 --steps 20 \
            --sim-compute cuda) | same_losses "$mesh (world 4), cpu against cuda" 20 1e-5 1e-5
    done
    USP_TEST_BACKEND=cuda CK_FORK=no "$build/tests/test_sim_staged"
}
bf16_against_sim() {
    for model in "tiny --seq 1024 --batch 1" "gpt2-124m --seq 256 --batch 1"; do
        paste <(losses --model $model --dtype bf16 --world 1 --steps 10) \
            <(losses --model $model --dtype bf16 --backend nccl --gpus 1 --steps 10) |
            same_losses "$model bf16, the cpu simulator against the GPU" 10 1e-4 1e-2
    done
}
peer() {
    local peer=()
    if python3 bench/gpu_peer.py --out "$build/peer.json"; then
        peer=(--peer "$build/peer.json")
    fi
    "$build/bench/gpu" "${peer[@]}"
}
calibration_loop() {
    local one
    one=$(mktemp -d)
    "$build/tools/usp" calibrate --backend nccl --world 1 --out "$one/one.json" >"$one/cal.txt"
    sed -n '/^kernel classes/,$p' "$one/cal.txt"
    for run in "tiny 16384 1" "gpt2-124m 1024 8" "llama-1b 8192 1 --dtype bf16 --tiled-loss"; do
        set -- $run
        "$build/tools/usp" train --backend nccl --gpus 1 --model "$1" --seq "$2" --batch "$3" "${@:4}" --steps 6 \
            --eval-samples 0 --trace "$one/run.json" >/dev/null
        echo "-- $run (at $((SECONDS - t0)) s)"
        "$build/tools/usp" plan --compare "$one/run.json" --topology "$one/one.json" --compare-steps 5 --compare-ops |
            sed -n '/^  phase/,/^  step/p; /^  collective/,/^transfer:/p; /^  op (a call/,/^an op:/p'
    done
    rm -rf "$one"
}
run 2 "conformance table on cuda" conformance
run 2b "tensor-core attention against the cpu attention (bf16 tolerances), twice bit for bit" tensor_core_attention
run 3 "usp train --backend nccl --gpus 1 (the default passkey task)" passkey
run 3b "simulated ranks on the one GPU (--sim-compute cuda) against the cpu simulator, ZeRO 3" simulated_ranks
run 3c "bf16 on the GPU against bf16 on the cpu simulator, every step's loss" bf16_against_sim
run 4 "PyTorch (bench/gpu_peer.py), then usp's kernels and training steps beside it" peer
run 4b "usp calibrate on the one GPU, then predicted against measured (issue 28)" calibration_loop
usp=$build/tools/usp
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
meshes_against_sim() {
    local meshes=("--ulysses $gpus" "--ring $gpus")
    (( gpus % 2 == 0 )) && meshes+=("--ulysses $((gpus / 2)) --bucket-mb 0.001")
    for mesh in "${meshes[@]}"; do
        a=$("$usp" train $mesh --world "$gpus" --steps 20 --log-every 5 --json | grep -o '"loss":[^,]*' | cut -d: -f2)
        b=$("$usp" train $mesh --backend nccl --gpus "$gpus" --steps 20 --log-every 5 --json |
            grep -o '"loss":[^,]*' | cut -d: -f2)
        paste <(echo "$a") <(echo "$b") | awk -v mesh="$mesh" '
            { d = $1 - $2; if (d < 0) d = -d; if (d > worst) worst = d; n++ }
            END { printf "%s: %d losses, worst |sim - nccl| %.2e\n", mesh, n, worst; exit !(n > 0 && worst < 1e-3) }'
    done
    echo "-- 5b. the safety net: rank 1's all-to-all never starts"
    local rc=0
    "$usp" train --backend nccl --gpus "$gpus" --steps 2 --inject stall:rank=1,op=all_to_all --timeout 20 \
        --dump-dir "$work/dumps" >/dev/null 2>"$work/stall.txt" || rc=$?
    echo "exit $rc (expected 3), $(ls "$work"/dumps/rank-*.usp-flight.json 2>/dev/null | wc -l) of $gpus records"
    "$usp" postmortem "$work/dumps" | head -3 || true
}
calibrate_gpus() { "$usp" calibrate --backend nccl --world "$gpus" --out "$work/calibrated.json"; }
compare_meshes() {
    [[ -s $work/calibrated.json ]] || { echo "no calibrated file (step 6)"; return 1; }
    for mesh in "--ulysses $gpus" "--ring $gpus"; do
        "$usp" train $mesh --backend nccl --gpus "$gpus" --model llama-1b --seq 32768 --batch 1 --dtype bf16 \
            --tiled-loss --steps 3 --eval-samples 0 --trace "$work/run.json" >/dev/null
        "$usp" plan --compare "$work/run.json" --topology "$work/calibrated.json"
    done
}
if (( gpus > 1 )); then
    run 5 "usp train --backend nccl --gpus $gpus against the simulator (losses)" meshes_against_sim
    run 6 "usp calibrate --backend nccl (busbw beside nccl-tests' figures for this machine)" calibrate_gpus
    run 7 "predicted (calibrated file) against measured, a Ulysses and a ring mesh" compare_meshes
fi
echo "gpu.sh: done in $((SECONDS - t0)) s${failed[*]:+; FAILED: ${failed[*]}}"
((${#failed[@]} == 0))
