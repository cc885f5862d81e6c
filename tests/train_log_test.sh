#!/usr/bin/env bash
# usp train --eval-every N (a held-out evaluation every N steps, the training's losses unchanged) and
# --log FILE (what the run prints, appended to FILE too), issue 29 item 8. Usage: train_log_test.sh PATH/TO/usp
set -u
source "$(dirname "$0")/cli_lib.sh" "$1"
tiny=(train --steps 6 --seq 64 --batch 2 --eval-samples 4 --log-every 1)
# the per-step losses of --json records, one "STEP LOSS" a line
step_losses() { sed -nE 's/^\{"step":([0-9]+),"loss":([^,]*),.*/\1 \2/p'; }

# --- --eval-every: a line after every N-th step, the last step's being the end's evaluation -------------
out=$("$usp" "${tiny[@]}" --eval-every 2 2>&1)
rc=$?
evals=$(grep -oE '^eval at step [0-9]+' <<<"$out" | awk '{print $4}' | tr '\n' ' ')
check "--eval-every 2 over 6 steps: eval lines after steps 2 4 6 (got '$evals', exit $rc)" test "$rc $evals" = "0 2 4 6 "
next=$(grep -A1 -E '^step +4/6 ' <<<"$out" | tail -n 1)
check "the line after step 4's progress names the loss, the accuracy and the samples: $next" \
    grep -qE '^eval at step 4: loss [0-9.]+ \(held-out\), passkey accuracy [0-9.]+% on 4 samples$' <<<"$next"
last=$(grep -oE '^eval at step 6: loss [0-9.]+' <<<"$out" | awk '{print $6}')
check "the eval line of the last step is the summary's held-out loss ($last)" \
    grep -q "^done: loss $last (held-out)" <<<"$out"
out=$("$usp" "${tiny[@]}" --eval-every 100 2>&1)
check "--eval-every past the last step: no eval line" test -z "$(grep '^eval at' <<<"$out")" -a -n "$(grep '^done: loss' <<<"$out")"

# --- --json: the summary's evals, and no record line of their own ---------------------------------------
json=$("$usp" "${tiny[@]}" --eval-every 3 --json 2>&1)
got=$(python3 -c '
import json, sys
lines = [json.loads(l) for l in sys.stdin if l.strip()]
s = lines[-1]
e = s.get("evals")
ok = (isinstance(e, list) and [x["step"] for x in e] == [3, 6] and
      all(isinstance(x["loss"], float) and 0 <= x["passkey_accuracy"] <= 1 for x in e) and
      e[-1]["loss"] == s["loss"] and all("summary" in l or set(l) >= {"step", "loss", "lr"} for l in lines))
print("ok" if ok else s)' <<<"$json" 2>&1)
check "--json --eval-every 3: evals [{step 3}, {step 6}] with loss and passkey_accuracy, the last the summary's ($got)" \
    test "$got" = ok
got=$("$usp" "${tiny[@]}" --eval-every 100 --json 2>&1 | tail -n 1)
check "--json --eval-every past the last step: evals is []" bash -c '[[ $1 == *"\"evals\":[]"* ]]' _ "$got"
got=$("$usp" "${tiny[@]}" --json 2>&1 | tail -n 1)
check "--json without --eval-every: no evals" bash -c '[[ $1 == *"\"summary\":true"* && $1 != *"evals"* ]]' _ "$got"

# --- the training is the same: every step's loss and the checkpoint, byte for byte ----------------------
for mesh in "--ulysses 4" "--ulysses 2 --ring 2 --zero 3 --micro-batches 2 --batch 4"; do
    read -ra m <<<"$mesh"
    rm -rf "$work/plain" "$work/evaluated"
    plain=$("$usp" "${tiny[@]}" "${m[@]}" --json --save "$work/plain" 2>&1 | step_losses)
    evaluated=$("$usp" "${tiny[@]}" "${m[@]}" --json --eval-every 1 --save "$work/evaluated" 2>&1 | step_losses)
    check "$mesh: the 6 steps' losses with --eval-every 1 are those without" \
        test "$(wc -l <<<"$plain")" -eq 6 -a "$plain" = "$evaluated"
    check "$mesh: the checkpoint with --eval-every 1 is the one without, byte for byte" \
        bash -c 'cmp -s "$1/model.safetensors" "$2/model.safetensors" &&
                 cmp -s "$1/optimizer.safetensors" "$2/optimizer.safetensors"' _ "$work/plain" "$work/evaluated"
done
rm -rf "$work/plain" "$work/evaluated"

# --- refusals (exit 2): a period that is no number of steps, evaluations of nothing, usp eval ------------
expect 2 "--eval-every 0: out of range; expected 1 to" -- "${tiny[@]}" --eval-every 0
expect 2 "--eval-every -3: out of range" -- "${tiny[@]}" --eval-every -3
expect 2 "--eval-every 2 with --eval-samples 0: an evaluation of no sample evaluates nothing" -- \
    train --steps 6 --seq 64 --batch 2 --eval-samples 0 --eval-every 2
"$usp" train --steps 1 --seq 64 --batch 2 --eval-samples 0 --save "$work/one" >/dev/null 2>&1
expect 2 "--eval-every is an option of usp train: usp eval runs no training step" -- \
    eval --resume "$work/one" --eval-samples 2 --eval-every 2

# --- SIGTERM: no evaluation after the step the ranks stopped at ------------------------------------------
"$usp" train --steps 600 --seq 64 --batch 2 --eval-samples 2 --log-every 1 --eval-every 1 >"$work/stop.out" \
    2>"$work/stop.err" &
pid=$!
for _ in $(seq 1 1200); do grep -q '^eval at step 5:' "$work/stop.out" && break; sleep 0.05; done
kill -TERM "$pid"
wait "$pid"
rc=$?
k=$(sed -nE 's/^step +([0-9]+)\/600 .*/\1/p' "$work/stop.out" | tail -n 1)
check "SIGTERM with --eval-every 1: exit 143 (got $rc), stopped after step $k, evaluated after step $((k - 1)), not $k" \
    test "$rc" -eq 143 -a -n "$k" -a -n "$(grep "^eval at step $((k - 1)):" "$work/stop.out")" -a \
    -z "$(grep "^eval at step $k:" "$work/stop.out")"

# --- --log FILE: the lines as printed (stdout and stderr), appended: a resumed run continues it ----------
"$usp" "${tiny[@]}" --eval-every 2 --until 3 --save "$work/ckpt" --log "$work/run.log" >"$work/a.out" 2>"$work/a.err"
"$usp" "${tiny[@]}" --eval-every 2 --resume "$work/ckpt" --log "$work/run.log" >"$work/b.out" 2>"$work/b.err"
check "--log: the file holds the first run's stdout, then the resumed run's" \
    test -s "$work/a.out" -a -s "$work/b.out" -a "$(cat "$work/a.out" "$work/b.out")" = "$(cat "$work/run.log")"
check "--log of the resumed run: its resumed line and its evaluations (steps 2, 4, 6) are in the file" \
    test -n "$(grep -x "usp train: resumed from $work/ckpt at step 3 of 6" "$work/run.log")" -a \
    "$(grep -c '^eval at step' "$work/run.log")" = 3
"$usp" "${tiny[@]}" --json --log "$work/json.log" >"$work/json.out" 2>&1
check "--log with --json: the records as printed" cmp -s "$work/json.out" "$work/json.log"
# a run that fails after it started: its error line goes to the file too, after what it printed
"$usp" train --steps 2 --seq 64 --batch 2 --eval-samples 0 --inject swap:rank=2,call=3 --log "$work/fail.log" \
    >"$work/fail.out" 2>"$work/fail.err"
rc=$?
check "--log of a failed run (exit $rc): stdout then the error on stderr, as printed" \
    test "$rc" -eq 2 -a -n "$(grep 'fired but changed nothing' "$work/fail.err")" -a \
    "$(cat "$work/fail.out" "$work/fail.err")" = "$(cat "$work/fail.log")"
# a path it cannot append to: exit 2 naming it, before anything runs
expect 2 "--log $work/nodir/run.log: cannot open it to append to (No such file or directory)" -- \
    "${tiny[@]}" --log "$work/nodir/run.log"
out=$("$usp" "${tiny[@]}" --log "$work" 2>&1)
rc=$?
check "--log DIRECTORY: exit 2 naming it, no run (exit $rc)" \
    bash -c '[[ $1 == 2 && $2 == *"--log $3: cannot open it to append to (Is a directory)"* && $2 != *"model tiny"* ]]' \
    _ "$rc" "$out" "$work"
check "a refused --log creates no file" test ! -e "$work/nodir"
# a log that fills up: the run goes on and prints, then says the log misses lines (exit 1)
if [[ -w /dev/full ]]; then
    expect 1 "--log /dev/full: writing it failed (No space left on device): the log misses lines" -- \
        train --steps 2 --seq 64 --batch 2 --eval-samples 0 --log /dev/full
fi
expect 0 "usp train [options]" -- train --help
out=$("$usp" train --help 2>&1)
check "train --help lists --eval-every and --log" bash -c '[[ $1 == *"--eval-every N"* && $1 == *"--log FILE"* ]]' _ "$out"

finish train_log
