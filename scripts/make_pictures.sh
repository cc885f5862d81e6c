#!/usr/bin/env bash
# Renders the pictures of docs/viz.md into docs/pictures/: the schedules of
# small fixed configurations (usp viz), the wait-for pictures of injected
# faults and a traffic map (usp selftest --dot), the traffic maps, a wait-for
# picture and a Chrome trace of short training runs (usp train --dot/--trace),
# one 64-rank picture of each kind that aggregates, and Chrome traces to open
# in Perfetto.
#
# Usage: scripts/make_pictures.sh [PATH/TO/usp]
# Without an argument it builds usp (Release, with Graphviz) in build/release.
# The runs are deterministic: the same usp gives the same DOT, byte for byte.
set -euo pipefail
cd "$(dirname "$0")/.."
usp=${1:-}
if [[ -z $usp ]]; then
    scripts/deps.sh
    cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF >/dev/null
    cmake --build build/release -j"$(nproc)" --target usp
    usp=build/release/tools/usp
fi
out=docs/pictures
mkdir -p "$out"

# picture NAME EXPECTED_EXIT FORMATS -- USP ARGS...: runs usp once per format with --dot NAME.FORMAT
picture() {
    local name=$1 want=$2 formats=$3
    shift 4
    for ext in $formats; do
        local rc=0
        "$usp" "$@" --dot "$out/$name.$ext" >/dev/null 2>&1 || rc=$?
        if [[ $rc -ne $want || ! -s $out/$name.$ext ]]; then
            echo "make_pictures: usp $* --dot $out/$name.$ext exited $rc (expected $want)" >&2
            exit 1
        fi
    done
    echo "  $out/$name.{${formats// /,}}"
}

echo "== schedules of one attention layer (usp viz)"
picture ulysses_w4 0 "dot svg png" -- viz --ulysses 4 --seq 16 --heads 8
picture ulysses_w4_gqa 0 "svg png" -- viz --ulysses 4 --seq 16 --heads 8 --kv-heads 2
picture ring_r4_causal 0 "dot svg png" -- viz --ring 4 --seq 16 --heads 8 --causal
picture ring_r4_full 0 "svg png" -- viz --ring 4 --seq 16 --heads 8
picture hybrid_2x2 0 "dot svg png" -- viz --ulysses 2 --ring 2 --seq 16 --heads 8 --causal
picture traffic_w16 0 "svg png" -- viz --world 16 --ulysses 4 --ring 4 --seq 64 --heads 8 --causal --picture traffic

echo "== wait-for pictures of injected faults (usp selftest --inject ... --dot)"
picture deadlock_w8 3 "dot svg png" -- selftest --world 8 --ulysses 4 --inject group:rank=2
picture crash_w8 4 "svg png" -- selftest --world 8 --ulysses 4 --inject crash:rank=2
picture mismatch_w8 3 "svg png" -- selftest --world 8 --ulysses 4 --inject size:rank=2

echo "== training runs (usp train --dot: the traffic map coloured by link, or the wait-for picture)"
train=(train --steps 1 --seq 64 --eval-samples 0)
picture train_traffic_w16 0 "dot svg png" -- "${train[@]}" --world 16 --ulysses 4 --ring 2 --batch 2
picture train_traffic_pcie 0 "svg png" -- "${train[@]}" --world 8 --ulysses 4 --ring 2 --batch 1 --topology pcie-gen4
picture train_deadlock 3 "svg png" -- "${train[@]}" --world 4 --ulysses 2 --ring 2 --batch 1 --inject skip:rank=1,op=sendrecv

echo "== 64 ranks: the aggregated forms"
picture ulysses_w64 0 "svg" -- viz --ulysses 64 --seq 128 --heads 64
picture ring_r64_causal 0 "svg png" -- viz --ring 64 --seq 128 --heads 8 --causal
picture deadlock_w64 3 "svg png" -- selftest --world 64 --ulysses 8 --inject group:rank=2

echo "== a Chrome trace (open it at https://ui.perfetto.dev)"
"$usp" viz --ulysses 2 --ring 2 --seq 16 --heads 3 --kv-heads 1 --causal --trace "$out/hybrid_2x2_trace.json" >/dev/null
echo "  $out/hybrid_2x2_trace.json"
"$usp" "${train[@]}" --world 4 --ulysses 2 --ring 2 --batch 1 --trace "$out/train_step_trace.json" >/dev/null
echo "  $out/train_step_trace.json"
