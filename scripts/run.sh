#!/usr/bin/env bash
# The main job: installs what is missing, builds usp (Release) and runs
# `usp train` on its defaults: 4 simulated GPUs, Ulysses 4, the tiny model on
# the passkey task. Extra arguments go to usp train.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF >/dev/null
cmake --build build/release -j"$(nproc)" --target usp
exec build/release/tools/usp train "$@"
