#!/usr/bin/env bash
# The mpi runtime beside the simulator, figures measured in one run (never asserted):
#   bench/mpi.sh [BUILD_DIR]   (default build/release; needs mpirun)
# 1. all_to_all bytes/s a rank at 4 ranks: sim, mpi (4 processes), memcpy.
# 2. the cost of --check-collectives per call (small all_reduce / all_to_all).
# 3. usp train tokens/s and step time: mpi (4 processes) vs sim (4 ranks), same
#    cores, same model and steps; the target is mpi within 1.25x of sim's step.
# 4. --check-collectives per step (%).
set -euo pipefail
build=$(realpath "${1:-build/release}")
usp=$build/tools/usp bench=$build/bench/mpi_comm
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
mpi=(mpirun --oversubscribe -np 4)
echo "cores: $(nproc)"
echo "== 1-2. the communicator"
"$bench" --runtime sim
"${mpi[@]}" "$bench" --runtime mpi
"${mpi[@]}" "$bench" --runtime mpi --check-collectives
echo "== 3-4. usp train (tiny model, ulysses 4, seq 256, 100 steps; interleaved runs, fastest of 3)"
args=(train --ulysses 4 --seq 256 --steps 100 --log-every 1000 --json)
wall() { python3 -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["wall_s"])'; }
best() { sort -g | head -n 1; }
sim=() mpi_t=() checked=()
for round in 1 2 3; do
    sim+=("$("$usp" "${args[@]}" | wall)")
    mpi_t+=("$("${mpi[@]}" "$usp" "${args[@]}" --backend mpi | wall)")
    checked+=("$("${mpi[@]}" "$usp" "${args[@]}" --backend mpi --check-collectives | wall)")
done
s=$(printf '%s\n' "${sim[@]}" | best) m=$(printf '%s\n' "${mpi_t[@]}" | best) c=$(printf '%s\n' "${checked[@]}" | best)
python3 - "$s" "$m" "$c" <<'PY'
import sys
s, m, c = map(float, sys.argv[1:])
tokens = 100 * 256 * 16  # steps x seq x batch
print(f"sim 4 ranks:       {s:.2f} s  {tokens / s:9.0f} tokens/s  {1e3 * s / 100:.2f} ms/step")
print(f"mpi 4 processes:   {m:.2f} s  {tokens / m:9.0f} tokens/s  {1e3 * m / 100:.2f} ms/step"
      f"  = {m / s:.2f}x sim's step (target <= 1.25)")
print(f"mpi --check-coll.: {c:.2f} s  {tokens / c:9.0f} tokens/s  = +{100 * (c / m - 1):.1f}% a step")
PY
