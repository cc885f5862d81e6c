#!/usr/bin/env bash
# The main job: installs what is missing, builds usp (Release) and runs it on
# its defaults. Until `usp train` lands, the main job is the selftest on a
# simulated 8-GPU machine (DP 2 x Ulysses 4). Extra arguments go to usp.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF >/dev/null
cmake --build build/release -j"$(nproc)" --target usp
exec build/release/tools/usp selftest --world 8 --ulysses 4 "$@"
