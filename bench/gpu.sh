#!/usr/bin/env bash
# The cuda backend on one GPU, in one script (under 8 minutes on an H100/H200):
#   bench/gpu.sh [BUILD_DIR]   (default build/gpu; needs nvcc, cuBLAS and a GPU)
# 1. builds usp with the cuda backend (Release, sm_90 unless CMAKE_CUDA_ARCHITECTURES is set);
# 2. the op-conformance table on cuda: every slot against the cpu backend, fp32 within the
#    table's tolerances, bf16 cases within their stated bounds (tests/conformance_bf16.c);
# 3. trains the default passkey task on one GPU (usp train --backend nccl --gpus 1) and
#    prints its accuracy (the goal: 100%);
# 4. bench/gpu: cuBLAS fp32/bf16 TFLOP/s, flash attention forward/backward TFLOP/s (bf16,
#    causal, head_dim 128, N 16384 and 65536) beside the GEMM, llama-1b at N 32768: tokens/s, MFU.
# Figures are printed, never asserted; the script stops at the first step that fails.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/gpu}
t0=$SECONDS
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "== 1. build ($build)"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DUSP_WITH_CUDA=ON -DUSP_WITH_MPI=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target usp test_backend_conformance bench_gpu >/dev/null
echo "built in $((SECONDS - t0)) s"
echo "== 2. conformance table on cuda"
CK_FORK=no "$build/tests/test_backend_conformance" --backend cuda
echo "== 3. usp train --backend nccl --gpus 1 (the default passkey task)"
"$build/tools/usp" train --backend nccl --gpus 1
echo "== 4. kernels and a training step"
"$build/bench/gpu"
echo "gpu.sh: done in $((SECONDS - t0)) s"
