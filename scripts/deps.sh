#!/usr/bin/env bash
# Installs the Debian packages usp needs to build and test, when they are
# missing: as root with apt-get; otherwise prints the exact command and exits 2.
# Sourced by scripts/run.sh and scripts/test.sh (also runnable on its own).
set -euo pipefail

packages=(
    gcc make cmake pkg-config   # the toolchain (C11, CMake >= 3.25)
    libopenblas-openmp-dev      # CBLAS: the OpenMP build, one thread pool with our kernels
    libjansson-dev              # JSON (configs, --json output, traces)
    libgraphviz-dev             # Graphviz's libgvc: SVG/PNG schedule diagrams
    check                       # the unit-test framework
    openmpi-bin libopenmpi-dev  # the mpi runtime: one process per rank under mpirun (and its tests)
    # the fuzzers need libFuzzer: clang, its runtimes (libFuzzer, ASan; a Recommends
    # that --no-install-recommends skips) and its OpenMP, which the build requires
    clang libclang-rt-dev libomp-dev
)

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
    exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
    echo "usp needs these Debian packages: ${missing[*]}" >&2
    echo "install them as root with:" >&2
    echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
    exit 2
fi
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
