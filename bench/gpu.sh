#!/usr/bin/env bash
# The cuda backend on one GPU, in one script (under 8 minutes on an H100/H200):
#   bench/gpu.sh [BUILD_DIR]   (default build/gpu; needs nvcc, cuBLAS and a GPU)
#   bench/gpu.sh --build-only [BUILD_DIR]   step 1 alone, no GPU needed (CI runs it wherever nvcc is)
# 1. builds usp with the cuda backend (Release, sm_90 unless CMAKE_CUDA_ARCHITECTURES is set);
# 2. the op-conformance table on cuda: every slot against the cpu backend, fp32 within the
#    table's tolerances, bf16 cases within their stated bounds (tests/conformance_bf16.c);
# 3. trains the default passkey task on one GPU (usp train --backend nccl --gpus 1) and
#    prints its accuracy (the goal: 100%);
# 4. bench/gpu: cuBLAS fp32/bf16 TFLOP/s, flash attention forward/backward TFLOP/s (bf16,
#    causal, head_dim 128, N 16384 and 65536) beside the GEMM, llama-1b at N 32768: tokens/s, MFU.
# With more than one GPU (issue 13), also:
# 5. usp train --backend nccl --gpus N (usp starts its N processes under mpirun) on the passkey
#    task against the simulator's losses on the same mesh (fp32: within 1e-3 of each);
# 6. usp calibrate --backend nccl: all_to_all / all_reduce / sendrecv busbw (compare with the
#    nccl-tests figures for the machine) and the kernels, written to a topology file;
# 7. a Ulysses and a ring mesh trained with --trace, then usp plan --compare with the calibrated
#    file: predicted against measured, phase by phase (the goal: step within 15%).
# Figures are printed, never asserted (the losses excepted); the script stops at the first step
# that fails.
set -euo pipefail
cd "$(dirname "$0")/.."
build_only=0
if [[ ${1:-} == --build-only ]]; then
    build_only=1
    shift
fi
build=${1:-build/gpu}
t0=$SECONDS
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "== 1. build ($build)"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
gpus=${gpus:-0}
mpi=OFF
(( gpus > 1 )) && mpi=ON # several GPUs are launched under mpirun
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DUSP_WITH_CUDA=ON -DUSP_WITH_MPI=$mpi >/dev/null
cmake --build "$build" -j"$(nproc)" --target usp test_backend_conformance bench_gpu >/dev/null
echo "built in $((SECONDS - t0)) s"
if ((build_only)); then
    exit 0
fi
echo "== 2. conformance table on cuda"
CK_FORK=no "$build/tests/test_backend_conformance" --backend cuda
echo "== 3. usp train --backend nccl --gpus 1 (the default passkey task)"
"$build/tools/usp" train --backend nccl --gpus 1
echo "== 4. kernels and a training step"
"$build/bench/gpu"
if (( gpus > 1 )); then
    usp=$build/tools/usp
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    echo "== 5. usp train --backend nccl --gpus $gpus against the simulator (losses)"
    for mesh in "--ulysses $gpus" "--ring $gpus"; do
        a=$("$usp" train $mesh --world "$gpus" --steps 20 --log-every 5 --json | grep -o '"loss":[^,]*' | cut -d: -f2)
        b=$("$usp" train $mesh --backend nccl --gpus "$gpus" --steps 20 --log-every 5 --json |
            grep -o '"loss":[^,]*' | cut -d: -f2)
        paste <(echo "$a") <(echo "$b") | awk -v mesh="$mesh" '
            { d = $1 - $2; if (d < 0) d = -d; if (d > worst) worst = d; n++ }
            END { printf "%s: %d losses, worst |sim - nccl| %.2e\n", mesh, n, worst; exit !(n > 0 && worst < 1e-3) }'
    done
    echo "== 6. usp calibrate --backend nccl (busbw beside nccl-tests' figures for this machine)"
    "$usp" calibrate --backend nccl --world "$gpus" --out "$work/calibrated.json"
    echo "== 7. predicted (calibrated file) against measured, a Ulysses and a ring mesh"
    for mesh in "--ulysses $gpus" "--ring $gpus"; do
        "$usp" train $mesh --backend nccl --gpus "$gpus" --model llama-1b --seq 32768 --batch 1 --dtype bf16 \
            --tiled-loss --steps 3 --eval-samples 0 --trace "$work/run.json" >/dev/null
        "$usp" plan --compare "$work/run.json" --topology "$work/calibrated.json"
    done
fi
echo "gpu.sh: done in $((SECONDS - t0)) s"
