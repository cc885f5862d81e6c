# Shared by the script tests that run usp under Open MPI (mpi_test.sh,
# calibrate_test.sh), sourced with the usp binary's path: sets `usp` (absolute),
# a scratch directory to work in (removed on exit), the pass / fail counters
# with `ok` and `fail WHAT [OUTPUT]`, and Open MPI's environment as CI runs it.
usp=$(realpath "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
passed=0 failed=0
# Each process keeps its own threads (the simulator's rank all the cores, an MPI
# process cores / ranks): the cpu kernels give the same bits for any thread count.
unset OMP_NUM_THREADS
# CI runs as root, in a container: Open MPI's consent to run as root, and no CMA
# (ptrace is refused there).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none

ok() { passed=$((passed + 1)); }
fail() {
    failed=$((failed + 1))
    echo "FAIL: $1"
    [[ -n ${2:-} ]] && echo "$2" | head -40 | sed 's/^/    /'
}
