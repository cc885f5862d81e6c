#!/usr/bin/env bash
# bench/gpu.sh's own logic, without a GPU: its options, and its steps on stand-in binaries (shell
# scripts that print what the real ones print, or fail). A GPU is lent for minutes, so the script
# must not be where the time goes: an unknown step or a missing binary is refused before anything
# runs (exit 2), a failing step is reported and the next one runs, and the exit says whether any
# failed. Usage: gpu_script_test.sh SOURCE_DIR
set -u
gpu_sh=$(realpath "$1")/bench/gpu.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0
ok() { passed=$((passed + 1)); }
fail() {
    failed=$((failed + 1))
    echo "FAIL: $1"
    [[ -n ${2:-} ]] && echo "$2" | head -40 | sed 's/^/    /'
}
# expect RC TEXT -- ARGS...: bench/gpu.sh ARGS exits RC and prints TEXT (stdout and stderr)
expect() {
    local want=$1 text=$2
    shift 3
    local out rc
    out=$(timeout 60 bash "$gpu_sh" "$@" 2>&1)
    rc=$?
    if [[ $rc -eq $want && $out == *"$text"* ]]; then
        ok
    else
        fail "bench/gpu.sh $*: exit $rc (want $want), wanted \"$text\"" "$out"
    fi
}

# The stand-ins. usp train prints one JSON line a step, loss 2 - step / 100; on the GPU (--backend nccl, or
# --sim-compute cuda) that loss times (1 + $GPU_LOSS_ERROR), or with $NO_GPU nothing (exit 2, as usp where
# no GPU is). Every other binary exits $FAIL_<NAME> (default 0).
fake=$work/build
mkdir -p "$fake/tools" "$fake/tests" "$fake/bench"
cat >"$fake/tools/usp" <<'EOF'
#!/usr/bin/env bash
[[ $1 == train ]] || exit 0
steps=1 gpu=0
for ((i = 1; i <= $#; i++)); do
    [[ ${!i} == --steps ]] && { j=$((i + 1)); steps=${!j}; }
    [[ ${!i} == nccl || ${!i} == cuda ]] && gpu=1
done
((gpu)) && [[ -n ${NO_GPU:-} ]] && { echo "usp train: no NVIDIA GPU here" >&2; exit 2; }
for ((s = 1; s <= steps; s++)); do
    awk -v s=$s -v g=$gpu -v e="${GPU_LOSS_ERROR:-0}" 'BEGIN { printf "{\"step\":%d,\"loss\":%.9g}\n", s, (2 - s / 100) * (1 + g * e) }'
done
echo '{"summary":true,"loss":1}'
EOF
for b in tests/test_backend_conformance tests/test_cuda_attention_mma tests/test_sim_staged bench/gpu; do
    name=$(basename "$b")
    printf '#!/usr/bin/env bash\necho "%s ran"\nexit ${FAIL_%s:-0}\n' "$name" "$name" >"$fake/$b"
done
chmod +x "$fake"/tools/usp "$fake"/tests/* "$fake"/bench/gpu

# options refused before anything runs
expect 2 "--only 2,9x: no step 9x (steps: 1, 2, 2b, 3, 3b, 3c, 4, 4b, 5, 6, 7)" -- --prebuilt --only 2,9x "$fake"
expect 2 "unknown option --fast" -- --fast
expect 2 "usage: bench/gpu.sh" -- --prebuilt "$fake" extra
mv "$fake/tests/test_sim_staged" "$work/staged"
expect 2 "--prebuilt: $fake/tests/test_sim_staged is not an executable" -- --prebuilt --only 2 "$fake"
mv "$work/staged" "$fake/tests/test_sim_staged"

# the steps named run, in order, each announced; the others do not
out=$(bash "$gpu_sh" --prebuilt --only 2b,2 "$fake" 2>&1)
rc=$?
if [[ $rc -eq 0 && $out == *"== 2. conformance"*"test_backend_conformance ran"*"== 2b. tensor-core"*"test_cuda_attention_mma ran"* &&
    $out != *"== 3"* && $out == *"gpu.sh: done in"* && $out != *FAILED* ]]; then
    ok
else
    fail "--only 2b,2: steps 2 then 2b, nothing else, exit 0 (got exit $rc)" "$out"
fi

# a failing step is reported, the next one runs, and the exit names it
export FAIL_test_backend_conformance=1
expect 1 "FAILED: 2" -- --prebuilt --only 2,2b "$fake"
out=$(bash "$gpu_sh" --prebuilt --only 2,2b "$fake" 2>&1)
[[ $out == *"== 2: FAILED (exit 1)"*"test_cuda_attention_mma ran"* ]] && ok ||
    fail "a failed step 2: reported, and step 2b ran after it" "$out"
unset FAIL_test_backend_conformance

# 3b and 3c compare every step's loss: equal losses pass; 3b's bound is 1e-5, 3c's 1e-2 after the first (1e-4)
expect 0 "--ulysses 4 (world 4), cpu against cuda: 20 losses" -- --prebuilt --only 3b "$fake"
expect 0 "gpt2-124m --seq 256 --batch 1 bf16, the cpu simulator against the GPU: 10 losses" -- --prebuilt --only 3c "$fake"
GPU_LOSS_ERROR=2e-5 expect 1 "FAILED: 3b" -- --prebuilt --only 3b "$fake"
GPU_LOSS_ERROR=2e-5 expect 0 "first 2.00e-05, worst 2.00e-05" -- --prebuilt --only 3c "$fake"
GPU_LOSS_ERROR=2e-4 expect 1 "FAILED: 3c" -- --prebuilt --only 3c "$fake"
# a GPU side that prints nothing fails the comparison: no line has both losses
NO_GPU=1 expect 1 "the cpu simulator against the GPU: 0 losses" -- --prebuilt --only 3c "$fake"

echo "gpu.sh tests: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
