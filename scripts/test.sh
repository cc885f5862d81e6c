#!/usr/bin/env bash
# Builds usp and passes every test: installs what is missing, then the tests
# of a normal build, then the unit tests again under AddressSanitizer +
# UndefinedBehaviorSanitizer (with LeakSanitizer).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
jobs=$(nproc)
# ctest runs $jobs tests at once, each with its own OpenMP pool: idle pools that
# spin would take the cores the others need (docs/runtimes.md, threads and cores).
export OMP_WAIT_POLICY=passive

echo "== build and test (RelWithDebInfo)"
cmake -S . -B build/test -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build/test -j"$jobs"
(cd build/test && ctest --output-on-failure -j"$jobs")

echo "== the layout's rules on that build (no cycle between files or rooms; file and function lengths)"
scripts/check_layout.sh build/test

echo "== build and test under ASan + UBSan + LSan"
cmake -S . -B build/asan -DCMAKE_BUILD_TYPE=Debug -DUSP_SANITIZE=ON >/dev/null
cmake --build build/asan -j"$jobs"
# The tutorials are left out here: each is a script of whole training runs that the
# build above already ran, and under the sanitizers two of them take 3-5 minutes
# each on 2 cores (measured); the unit tests, cli and bench smoke runs cover their code.
# So is `mpi` (tests/mpi_test.sh: some 30 whole training runs under mpirun); the
# mpi runtime's own calls run here under the sanitizers in mpi_comm_3 and mpi_comm_4.
# So is `docs` (the docs' pasted outputs): a Debug build sums in another order than
# the build the docs were pasted from, and the RelWithDebInfo run above checks them.
# So is `generate` (tests/generate_test.sh: 1200 training steps, past its limits under
# the sanitizers); test_generate runs generation's code here.
(cd build/asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --output-on-failure -j"$jobs" -E '^(tutorial_|mpi$|docs$|generate$)')

# libFuzzer on the readers of untrusted files (safetensors, config.json): 20 s
# each from the seed corpus; a crash, leak, sanitizer report or broken round
# trip exits non-zero (set -e) and leaves the input as build/fuzz/crash-*.
if command -v clang >/dev/null; then
    echo "== fuzz the safetensors and config.json readers (libFuzzer, 20 s each)"
    CC=clang cmake -S . -B build/fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUSP_FUZZ=ON >/dev/null
    cmake --build build/fuzz -j"$jobs" --target fuzz_safetensors fuzz_model_config
    for target in safetensors model_config; do
        mkdir -p "build/fuzz/corpus_$target" # new inputs go here; the seeds stay as they are
        log="build/fuzz/fuzz_$target.log"
        if ! "build/fuzz/tests/fuzz/fuzz_$target" -max_total_time=20 -dict=tests/fuzz/json.dict \
            -artifact_prefix="build/fuzz/crash-$target-" "build/fuzz/corpus_$target" "tests/fuzz/corpus_$target" \
            >"$log" 2>&1; then
            tail -n 60 "$log" >&2
            echo "fuzz_$target failed: the input is in build/fuzz/crash-$target-*, the log in $log" >&2
            exit 1
        fi
        echo "fuzz_$target: $(grep -E '^Done' "$log")"
    done
fi
