#!/usr/bin/env bash
# usp against its peer on the CPU: the same Llama-style model (d_model 128, 4 layers, 4 heads
# of 32, d_ff 512, vocab 256: bench/peer_config.json), one sequence of N tokens per step,
#   usp:     4 simulated ranks, Ulysses 4, one process (its default threads);
#   PyTorch: Ulysses over gloo, 2 processes of 1 thread (bench/peer_pytorch.py), from
#            Debian's python3-torch (apt-get install python3-torch; skipped without it).
#   bench/peer.sh [BUILD_DIR] [N ...]     (default build/release, N = 4096 16384)
# For each N: first the numerics (usp trains one step and saves; `usp eval` and the PyTorch
# model loaded from that checkpoint give the loss of the same sequence: they must agree to
# 1e-4), then interleaved timed runs (2 rounds of 4 steps each), best step of each side.
# The issue's target: usp >= 1.5x PyTorch's tokens/s. Figures are printed, never asserted.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
shift || true
lengths=("${@:-4096 16384}")
read -r -a lengths <<<"${lengths[*]}"
usp=$build/tools/usp py=/usr/bin/python3 cfg=bench/peer_config.json
if ! "$py" -c 'import torch' 2>/dev/null; then
    echo "bench/peer: skipped: PyTorch is not installed (apt-get install python3-torch)"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
vectors() { # as bench/cpu_vectors.h says it
    if grep -qw avx512f /proc/cpuinfo; then echo "AVX-512 (512-bit)"; elif grep -qw avx2 /proc/cpuinfo; then
        echo "AVX2 (256-bit)"; else echo "SSE2 (128-bit)"; fi
}
echo "cpu: $(vectors); $(nproc) cores; torch $("$py" -c 'import torch; print(torch.__version__)')"
# the wall seconds of each step of a usp --json run, from its cumulative tokens/s
usp_steps() { "$py" -c '
import json, sys
n = int(sys.argv[1]); prev = 0.0; out = []
for line in sys.stdin:
    r = json.loads(line)
    if "step" in r and not r.get("summary"):
        t = r["step"] * n / r["tokens_per_s"]; out.append(t - prev); prev = t
print(" ".join(f"{s:.4f}" for s in out))' "$1"; }
for N in "${lengths[@]}"; do
    "$py" -c "import random, sys; random.seed(7); sys.stdout.buffer.write(bytes(random.randrange(256) for _ in range($N + 1)))" \
        >"$tmp/data"
    mesh=(--model "$cfg" --data "text:$tmp/data" --seq "$N" --batch 1 --world 4 --ulysses 4)
    "$usp" train "${mesh[@]}" --steps 1 --eval-samples 0 --save "$tmp/ckpt" >/dev/null
    ours=$("$usp" eval --resume "$tmp/ckpt" "${mesh[@]}" --eval-samples 1 --json | tail -n 1)
    theirs=$("$py" bench/peer_pytorch.py --config "$cfg" --data "$tmp/data" --seq "$N" --check "$tmp/ckpt")
    "$py" -c '
import json, sys
a, b = json.loads(sys.argv[1])["loss"], json.loads(sys.argv[2])["loss"]
e = abs(a - b) / abs(a)
verdict = "agree" if e <= 1e-4 else "DISAGREE: the timings below are not of the same model"
print(f"N {sys.argv[3]}: loss of the saved weights: usp {a:.7f}, PyTorch {b:.7f}, relative {e:.1e} ({verdict})")' \
        "$ours" "$theirs" "$N"
    best_usp=() best_pt=()
    for round in 1 2; do
        best_usp+=($("$usp" train "${mesh[@]}" --steps 4 --log-every 1 --eval-samples 0 --json | usp_steps "$N"))
        best_pt+=($("$py" bench/peer_pytorch.py --config "$cfg" --data "$tmp/data" --seq "$N" --steps 4 |
            "$py" -c 'import json, sys; print(" ".join(str(s) for s in json.loads(sys.stdin.read())["step_s"][1:]))'))
    done
    "$py" -c '
import sys
n = int(sys.argv[1]); u = min(map(float, sys.argv[2].split())); p = min(map(float, sys.argv[3].split()))
print(f"N {n}: best step: usp {u:.3f} s = {n / u:.0f} tokens/s; PyTorch + gloo {p:.3f} s = {n / p:.0f} tokens/s;"
      f" usp / PyTorch = {p / u:.2f} (target >= 1.5)")' "$N" "${best_usp[*]}" "${best_pt[*]}"
done
