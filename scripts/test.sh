#!/usr/bin/env bash
# Builds usp and passes every test: installs what is missing, then the tests
# of a normal build, then the unit tests again under AddressSanitizer +
# UndefinedBehaviorSanitizer (with LeakSanitizer).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
jobs=$(nproc)

echo "== build and test (RelWithDebInfo)"
cmake -S . -B build/test -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build/test -j"$jobs"
(cd build/test && ctest --output-on-failure -j"$jobs")

echo "== build and test under ASan + UBSan + LSan"
cmake -S . -B build/asan -DCMAKE_BUILD_TYPE=Debug -DUSP_SANITIZE=ON >/dev/null
cmake --build build/asan -j"$jobs"
(cd build/asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --output-on-failure -j"$jobs")
