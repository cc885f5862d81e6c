#!/usr/bin/env bash
# The mpi runtime in real processes (mpirun on loopback): the same losses as
# the simulator, checkpoints across backends, every injected fault caught by
# --check-collectives, the watchdog and `usp postmortem`, a rank killed with
# SIGKILL; usp starting its own processes under mpirun when none started it
# (the same losses, exit codes through mpirun, the refusals); a measured --trace
# and usp plan --compare of it; errors prefixed with the process's rank; --eval-every
# and --log. Usage: mpi_test.sh PATH/TO/usp
set -u
source "$(dirname "$0")/script_lib.sh" "$1"
mpi=(mpirun --oversubscribe -np 4) # CI has 2 cores; 4 ranks need --oversubscribe

# The summary line of a run (--json's last line), without its times and peaks (the
# attention workspace is per thread, and the backends run different thread counts) and
# the simulator's own fit against its modelled GPU (`fits`: a real backend models none),
# what its clock is (`clock`: modelled on the simulator, measured here) and its host waits
# (the simulator's virtual streams count a GPU's; the cpu backend here completes each op at once).
summary() {
    tail -n 1 | sed -E 's/"(tokens_per_s|wall_s|clock_s|sim_time_s|steps_time_s|host_waits_per_step)":[^,]*,//g
        s/"peak_bytes":\[[^]]*\],//
        s/"fits":(true|false),//; s/"clock":"[a-z]+",//'
}

# --- the same losses as the simulator, bit for bit -----------------------------
# (the last two: DP 2 with the gradients all-reduced over the world in a bucket a layer, during backward)
for mesh in "--ulysses 4" "--ring 4" "--ulysses 2 --ring 2" "--ulysses 2" "--ulysses 2 --zero 1 --bucket-mb 0.01" \
    "--ring 2 --bucket-mb 0.01"; do
    args=(train $mesh --steps 50 --log-every 10 --json)
    sim=$("$usp" "${args[@]}" 2>&1)
    got=$(timeout 120 "${mpi[@]}" "$usp" "${args[@]}" --backend mpi 2>&1)
    # every progress record's loss, and the summary (loss, peaks, accuracy)
    a=$(echo "$sim" | grep -o '"loss":[^,]*' | tr '\n' ' ')
    b=$(echo "$got" | grep -o '"loss":[^,]*' | tr '\n' ' ')
    if [[ -n $a && $a == "$b" && $(echo "$sim" | summary) == "$(echo "$got" | summary)" &&
        $sim == *'"clock":"modelled"'* && $got == *'"clock":"measured"'* ]]; then
        ok
    else
        fail "mpi $mesh: losses differ from the simulator's" "sim: $a
mpi: $b
$got"
    fi
done

# --- checkpoints across backends ------------------------------------------------
"$usp" train --ulysses 2 --ring 2 --steps 20 --until 10 --save sim_ckpt >/dev/null 2>&1
timeout 120 "${mpi[@]}" "$usp" train --backend mpi --ulysses 2 --ring 2 --steps 20 --until 10 --save mpi_ckpt \
    >/dev/null 2>&1
if cmp -s sim_ckpt/model.safetensors mpi_ckpt/model.safetensors &&
    cmp -s sim_ckpt/optimizer.safetensors mpi_ckpt/optimizer.safetensors &&
    cmp -s sim_ckpt/config.json mpi_ckpt/config.json &&
    cmp -s sim_ckpt/usp_checkpoint.json mpi_ckpt/usp_checkpoint.json; then
    ok
else
    fail "an mpi --save is not the simulator's bytes" "$(ls -l sim_ckpt mpi_ckpt 2>&1)"
fi
whole=$("$usp" train --ulysses 2 --ring 2 --steps 20 --json 2>&1 | summary | grep -o '"loss":[^,]*')
from_sim=$(timeout 120 "${mpi[@]}" "$usp" train --backend mpi --ulysses 2 --ring 2 --steps 20 --resume sim_ckpt \
    --json 2>&1 | summary | grep -o '"loss":[^,]*')
from_mpi=$("$usp" train --ulysses 2 --ring 2 --steps 20 --resume mpi_ckpt --json 2>&1 | summary |
    grep -o '"loss":[^,]*')
if [[ -n $whole && $whole == "$from_sim" && $whole == "$from_mpi" ]]; then
    ok
else
    fail "resume across backends: whole run $whole, mpi from a sim checkpoint $from_sim, sim from an mpi one $from_mpi"
fi

# --- launch errors ----------------------------------------------------------------
out=$(timeout 60 mpirun --oversubscribe -np 2 "$usp" train --backend mpi --world 4 --steps 1 2>&1)
rc=$?
[[ $rc -eq 2 && $out == *"--world 4: the launcher started 2 processes"* ]] && ok ||
    fail "--world 4 under mpirun -np 2: exit $rc" "$out"
# Every process prints its own errors, saying whose: before MPI starts (an option every process refuses)
out=$(timeout 60 mpirun --oversubscribe -np 2 "$usp" train --backend mpi --resume nodir 2>&1)
rc=$?
[[ $rc -eq 2 && $out == *"usp train [rank 0]: --resume nodir: no such directory"* &&
    $out == *"usp train [rank 1]: --resume nodir: no such directory"* ]] && ok ||
    fail "an option error under mpirun -np 2 names each process's rank: exit $rc" "$out"

# --- --eval-every and --log under mpirun: the simulator's evaluations, at the same steps; rank 0 writes the log ---
args=(train --ulysses 2 --steps 4 --seq 64 --batch 2 --eval-samples 2 --log-every 1 --eval-every 2)
losses() { grep -oE '^(step +[0-9]+/[0-9]+  loss [0-9.]+|eval at step [0-9]+: loss [0-9.]+)' | tr '\n' ' '; }
sim=$("$usp" "${args[@]}" --world 2 2>&1 | losses)
timeout 120 mpirun --oversubscribe -np 2 "$usp" "${args[@]}" --backend mpi --log mpi.log >mpi.out 2>mpi.err
rc=$?
got=$(losses <mpi.out)
if [[ $rc -eq 0 && $sim == *"eval at step 2: loss "*"eval at step 4: loss "* && $got == "$sim" ]] &&
    cmp -s mpi.out mpi.log; then
    ok
else
    fail "mpirun -np 2 --eval-every 2 --log: exit $rc, the log $(cmp mpi.out mpi.log 2>&1 || echo differs)" "sim: $sim
mpi: $got
$(cat mpi.err)"
fi

# --- usp starting its own processes (no launcher in front; runtimes/process/mpi_self_launch.c) ---
unset OMPI_COMM_WORLD_SIZE PMIX_SIZE PMI_SIZE SLURM_STEP_NUM_TASKS # what tells usp a launcher started it
# The same losses as an explicit mpirun -np 2, and one launch line: a launched process does not launch again.
args=(train --backend mpi --world 2 --steps 4 --log-every 1 --json)
explicit=$(timeout 120 mpirun --oversubscribe -np 2 "$usp" "${args[@]}" 2>&1 | grep -o '"loss":[^,]*' | tr '\n' ' ')
timeout 120 "$usp" "${args[@]}" >launch.out 2>launch.err
rc=$?
self=$(grep -o '"loss":[^,]*' launch.out | tr '\n' ' ')
if [[ $rc -eq 0 && -n $explicit && $self == "$explicit" && $(grep -c '^usp: launching ' launch.err) -eq 1 &&
    $(cat launch.err) == "usp: launching 2 processes: "*"mpi"*" -np 2 $usp train --backend mpi --world 2 "* ]]; then
    ok
else
    fail "self-launched --world 2: exit $rc" "explicit mpirun: $explicit
self-launched: $self
$(cat launch.err)"
fi
# A Slurm batch script's SLURM_NTASKS is no launcher (srun's SLURM_STEP_NUM_TASKS is): usp starts its processes.
out=$(SLURM_NTASKS=8 timeout 120 "$usp" train --backend mpi --world 2 --steps 1 --eval-samples 0 2>&1)
rc=$?
[[ $rc -eq 0 && $out == "usp: launching 2 processes: "* ]] && ok ||
    fail "--world 2 with SLURM_NTASKS=8 and no srun: exit $rc" "$out"
# More ranks than cores: --oversubscribe on the line (Open MPI's slots are cores, which nproc's CPUs
# bound from above), and the simulator's losses.
args=(train --backend mpi --world 4 --ulysses 2 --ring 2 --steps 2 --json)
sim=$("$usp" train --world 4 --ulysses 2 --ring 2 --steps 2 --json 2>&1 | grep -o '"loss":[^,]*' | tr '\n' ' ')
timeout 120 "$usp" "${args[@]}" >launch.out 2>launch.err
rc=$?
self=$(grep -o '"loss":[^,]*' launch.out | tr '\n' ' ')
over=$(grep -c -- '-np 4 --oversubscribe ' launch.err)
if [[ $rc -eq 0 && -n $sim && $self == "$sim" && ($(nproc) -ge 4 || $over -eq 1) ]]; then
    ok
else
    fail "self-launched --world 4 on $(nproc) cores: exit $rc" "sim: $sim
self-launched: $self
$(cat launch.err)"
fi
# The job's exit code is the first failing rank's, through mpirun: 3 for a mismatch and a watchdog-ended hang, 4 for a crash.
for case in "3 --check-collectives --inject skip:rank=1,op=all_to_all" "3 --timeout 3 --inject swap:rank=1,op=all_reduce" \
    "4 --timeout 30 --inject crash:rank=1,op=all_to_all"; do # (30 s: the crash, not a watchdog, ends it)
    want=${case%% *}
    read -ra extra <<<"${case#* }"
    out=$(timeout 60 "$usp" train --backend mpi --world 2 --steps 3 "${extra[@]}" 2>&1)
    rc=$?
    [[ $rc -eq $want && $out == "usp: launching 2 processes: "* ]] && ok ||
        fail "self-launched ${extra[*]}: exit $rc, expected $want" "$out"
done
# A swap of two alike collectives (Ulysses' Q and K all-to-alls): only rank 2's process saw it, and it says
# so, naming its rank (exit 2); the others do not claim it never fired (each process counts only its own calls).
out=$(timeout 60 "$usp" train --backend mpi --world 4 --steps 2 --seq 64 --batch 2 --eval-samples 0 \
    --inject swap:rank=2,call=3 2>&1)
rc=$?
[[ $rc -eq 2 && $out == *"usp train [rank 2]: --inject swap:rank=2,op=any,call=3 fired but changed nothing (it exchanged two alike"* &&
    $out != *"never fired"* ]] && ok || fail "mpi --inject swap of two alike calls: exit $rc" "$out"
# Forgetting --backend mpi under mpirun: each process would simulate every rank; refused, naming the fix.
out=$(timeout 60 mpirun --oversubscribe -np 2 "$usp" train --ulysses 2 --steps 1 --seq 64 --batch 2 2>&1)
rc=$?
[[ $rc -eq 2 && $out == *"--backend sim under a launcher of 2 processes (OMPI_COMM_WORLD_SIZE=2)"* &&
    $out == *"add --backend mpi"* && $out != *"done: loss"* ]] && ok || fail "sim under mpirun -np 2: exit $rc" "$out"
out=$(timeout 60 mpirun --oversubscribe -np 1 "$usp" train --ulysses 2 --world 2 --steps 1 --seq 64 --batch 2 2>&1)
rc=$?
[[ $rc -eq 0 && $out == *"done: loss"* ]] && ok || fail "sim under mpirun -np 1 (one process simulates all): exit $rc" "$out"
# The recursion guard: a process that carries usp's marker yet sees no launcher refuses to launch.
out=$(USP_SELF_LAUNCHED=1 timeout 60 "$usp" train --backend mpi --world 2 --steps 1 2>&1)
rc=$?
[[ $rc -eq 2 && $out == *"not launching again"* && $out != *"usp: launching"* ]] && ok ||
    fail "USP_SELF_LAUNCHED=1 without a launcher: exit $rc" "$out"
# No mpirun: exit 2 naming the package and the lines to type, before anything starts.
out=$(PATH=/nonexistent USP_MPIRUN=/nonexistent "$usp" train --backend mpi --world 2 --steps 1 2>&1)
rc=$?
[[ $rc -eq 2 && $out == *"found no mpirun (USP_MPIRUN=/nonexistent is not an executable file)"* &&
    $out == *"apt-get install openmpi-bin"* && $out == *"mpirun -np 2 $usp train"* && $out == *"srun -n 2 $usp train"* &&
    $out != *"usp: launching"* ]] && ok || fail "no mpirun: exit $rc" "$out"
# mpirun not on PATH: the one the build found. (Open MPI wants its remote agent, ssh, on PATH even for
# one node, and never runs it there: a stand-in that fails will do.)
mkdir -p nompirun && ln -sf "$(type -P false)" nompirun/ssh
out=$(timeout 120 env PATH="$work/nompirun" "$usp" train --backend mpi --world 2 --steps 1 2>&1)
rc=$?
[[ $rc -eq 0 && $out == "usp: launching 2 processes: /"* && $out == *"done: loss"* ]] && ok ||
    fail "mpirun not on PATH (the build's instead): exit $rc" "$out"
# As root, Open MPI's consent must be in the environment: usp asks for it, never sets it.
if [[ $(id -u) -eq 0 ]]; then
    out=$(env -u OMPI_ALLOW_RUN_AS_ROOT -u OMPI_ALLOW_RUN_AS_ROOT_CONFIRM "$usp" train --backend mpi --world 2 \
        --steps 1 2>&1)
    rc=$?
    [[ $rc -eq 2 && $out == *"set OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"* &&
        $out != *"usp: launching"* ]] && ok || fail "root without OMPI_ALLOW_RUN_AS_ROOT: exit $rc" "$out"
fi

# --- every injected fault caught by --check-collectives: exit 3, well before the 60 s that would mean a hang (30 s: loaded machines)
# The report names the ranks, the op, the group, the call's number and its call site.
for fault in skip:rank=2,op=all_to_all swap:rank=1,op=all_reduce size:rank=1,op=all_to_all \
    group:rank=1,op=all_reduce size:rank=3,op=sendrecv; do
    start=$SECONDS
    out=$(timeout 60 "${mpi[@]}" "$usp" train --backend mpi --ulysses 2 --ring 2 --steps 3 --check-collectives \
        --inject "$fault" 2>&1)
    rc=$?
    took=$((SECONDS - start))
    if [[ $rc -eq 3 && $took -le 30 && $out == *"collective mismatch on "* && $out == *"calls "*" as its call #"* &&
        $out == *" at core/"*".c:"* && $out == *"rank states:"* ]]; then
        ok
    else
        fail "--check-collectives --inject $fault: exit $rc after ${took} s" "$out"
    fi
done

# --- the same faults without the check: the watchdog (or MPI itself) ends the run ---
# A swapped or misdirected collective hangs: every stuck rank's watchdog fires after
# --timeout 3 (exit 3). A skipped or resized one makes MPI see a truncated message: the
# rank fails (exit 4), as does an injected crash. Either way every rank leaves its flight record, and
# `usp postmortem` names the rank that broke the schedule.
for fault in swap:rank=1,op=all_reduce group:rank=1,op=all_reduce skip:rank=2,op=all_to_all \
    size:rank=1,op=all_to_all crash:rank=2,op=all_to_all; do
    culprit=${fault#*rank=}
    culprit=${culprit%%,*}
    rm -rf dumps
    start=$SECONDS
    out=$(timeout 60 "${mpi[@]}" "$usp" train --backend mpi --ulysses 2 --ring 2 --steps 3 --timeout 3 \
        --dump-dir dumps --inject "$fault" 2>&1)
    rc=$?
    took=$((SECONDS - start))
    report=$(timeout 30 "$usp" postmortem dumps 2>&1)
    prc=$?
    if [[ ($rc -eq 3 || $rc -eq 4) && $took -le 30 && $(ls dumps/rank-*.usp-flight.json | wc -l) -eq 4 && ($prc -eq 3 || $prc -eq 4) &&
        $report == *"rank $culprit"* && $report == *"rank states:"* ]]; then
        ok
    else
        fail "--timeout 3 --inject $fault: exit $rc after ${took} s, postmortem exit $prc" "$out
$(ls dumps 2>&1)
$report"
    fi
done

# --- a rank killed with SIGKILL mid-run: the others end with a record, none hangs ---
rm -rf dumps
"${mpi[@]}" "$usp" train --backend mpi --ulysses 4 --steps 100000 --log-every 20 --timeout 5 --dump-dir dumps \
    >run.log 2>&1 &
launcher=$!
for _ in $(seq 1 100); do grep -q "^step" run.log && break; sleep 0.2; done
victim=
for pid in $(pgrep -f "usp train --backend mpi --ulysses 4 --steps 100000"); do
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=2 && victim=$pid
done
start=$SECONDS
[[ -n $victim ]] && kill -KILL "$victim"
for _ in $(seq 1 100); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.2; done
took=$((SECONDS - start))
kill -KILL "$launcher" 2>/dev/null
wait "$launcher" 2>/dev/null
report=$(timeout 30 "$usp" postmortem dumps 2>&1)
if [[ -n $victim && $took -le 30 && ! -e dumps/rank-2.usp-flight.json && $(ls dumps/rank-*.usp-flight.json | wc -l) -eq 3 &&
    $report == *"rank 2"* ]]; then
    ok
else
    fail "rank 2 killed (pid ${victim:-none found}): the job ended after ${took} s" "$(cat run.log)
$(ls dumps 2>&1)
$report"
fi

# --- --trace: measured times, one file; usp plan --compare of it --------------------
# 2 processes write one Chrome trace with a track per rank, time on each rank's compute, call and step
# tracks and the run's options; usp plan --compare reads it (exit 0, a row per phase; --json)
out=$(timeout 120 mpirun --oversubscribe -np 2 "$usp" train --backend mpi --world 2 --steps 2 --seq 64 --batch 2 \
      --eval-samples 0 --trace measured.json 2>&1)
rc=$?
got=$(python3 -c "
import json, collections
d = json.load(open('measured.json'))
run = d['otherData']['usp_run']
began, took = {}, collections.defaultdict(float)
for e in d['traceEvents']:
    track = (e['pid'], e['tid'])
    if e['ph'] == 'B': began.setdefault(track, []).append(e['ts'])
    elif e['ph'] == 'E': took[track] += e['ts'] - began[track].pop()
idle = [t for t in [(r, tid) for r in (0, 1) for tid in (0, 1, 2)] if took[t] <= 0]
ranks = sorted({p for p, t in took})
print('ok' if ranks == [0, 1] and not idle and run['backend'] == 'mpi' and run['world'] == 2
      else 'ranks %s, tracks without time %s, run %s' % (ranks, idle, run))" 2>&1)
if [[ $rc -eq 0 && $out == *"trace in measured.json"* && $got == ok ]]; then
    ok
else
    fail "mpirun -np 2 usp train --backend mpi --trace: exit $rc, $got" "$out"
fi
out=$(timeout 120 "$usp" plan --compare measured.json 2>&1)
rc=$?
rows=0
for row in attention gemm other_compute all_to_all all_reduce compute communication step; do
    [[ $out == *$'\n'"  $row "* ]] && rows=$((rows + 1))
done
if [[ $rc -eq 0 && $rows -eq 8 && $out == *"the run: step 2 of 2, measured on this machine (MPI), mean of 2 ranks"* ]]; then
    ok
else
    fail "usp plan --compare of the measured trace: exit $rc, $rows of 8 rows" "$out"
fi
got=$(timeout 120 "$usp" plan --compare measured.json --json | python3 -c "
import json, sys
d = json.load(sys.stdin)
p = {x['phase']: x for x in d['phases']}
print('ok' if d['backend'] == 'mpi' and d['step'] == 2 and p['step']['measured_s'] > 0 and p['step']['ratio'] > 0
      else d)" 2>&1)
[[ $got == ok ]] && ok || fail "usp plan --compare --json of the measured trace" "$got"
out=$("$usp" train --backend mpi --world 1 --steps 1 --dot x.dot 2>&1)
rc=$?
[[ $rc -eq 2 && $out == *"--dot with --backend mpi: pictures are the simulator's"* ]] && ok ||
    fail "--dot with --backend mpi: exit $rc (expected 2)" "$out"

# --- SIGTERM to rank 2 alone at a random step: the ranks agree on the step, stop after it, save it and ---
# exit 143; --resume gives the uninterrupted run's losses bit for bit
losses_after() { sed -nE 's/^\{"step":([0-9]+),"loss":([^,]*),.*/\1 \2/p' | awk -v k="$1" '$1 > k'; }
run=(train --backend mpi --ulysses 2 --ring 2 --steps 300 --seq 64 --batch 4 --eval-samples 0 --log-every 1 --json)
whole=$(timeout 120 "${mpi[@]}" "$usp" "${run[@]}" 2>&1)
"${mpi[@]}" "$usp" "${run[@]}" --save mpi_stopped >stopped.out 2>stopped.err &
launcher=$!
at=$((2 + RANDOM % 99)) # a random step in 2-100
for _ in $(seq 1 1200); do grep -q "\"step\":$at," stopped.out && break; sleep 0.05; done
for pid in $(pgrep -f "usp train --backend mpi --ulysses 2 --ring 2 --steps 300"); do
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=2 && kill -TERM "$pid"
done
wait "$launcher"
rc=$?
k=$(sed -nE 's/.*"step":([0-9]+),.*/\1/p' stopped.out | tail -n 1)
saved=$(sed -nE 's/.*"step": ([0-9]+),.*/\1/p' mpi_stopped/usp_checkpoint.json 2>/dev/null)
resumed=$(timeout 120 "${mpi[@]}" "$usp" "${run[@]}" --resume mpi_stopped 2>&1)
if [[ $rc -eq 143 && -n $k && $k == "$saved" && $k -lt 300 && -n $(losses_after "$k" <<<"$whole") &&
    $(losses_after "$k" <<<"$whole") == "$(losses_after "$k" <<<"$resumed")" ]]; then
    ok
else
    fail "SIGTERM to rank 2 under mpirun: exit $rc (expected 143), last record step ${k:-none}, saved ${saved:-none}" \
        "$(tail -n 3 stopped.out; cat stopped.err)"
fi

echo "mpi tests: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
