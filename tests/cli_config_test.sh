#!/usr/bin/env bash
# --config FILE and --print-config (tools/cli_config.h, docs/CONTRACT.md "Config files"): a file of options
# gives the run the same options on the command line give, the command line overrides it, what
# --print-config prints reads back to the same options, and a bad file is exit 2 naming the file, the key
# and the value.
# Usage: cli_config_test.sh PATH/TO/usp
set -u
source "$(dirname "$0")/cli_lib.sh" "$1"

# config KEY-VALUES...: writes {KEY-VALUES} to $work/c.json (its path on stdout)
config() {
    local IFS=,
    echo "{$*}" >"$work/c.json"
    echo "$work/c.json"
}
loss_of() { "$usp" "$@" --json 2>&1 | tail -1 | grep -o '"loss":[^,]*'; }
printed() { "$usp" "$@" --print-config 2>&1; }

# the same run: a file of options and the same options on the command line
cfg=$(config '"steps": 3' '"seq": 64' '"batch": 2' '"eval-samples": 0' '"lr": 0.003' '"recompute": true')
from_line=$(loss_of train --steps 3 --seq 64 --batch 2 --eval-samples 0 --lr 0.003 --recompute)
from_file=$(loss_of train --config "$cfg")
check "a config file's run is the command line's: loss $from_file, from the command line $from_line" \
    test -n "$from_line" -a "$from_line" = "$from_file"
check "--print-config of the file is --print-config of the same command line" \
    test "$(printed train --config "$cfg")" = "$(printed train --steps 3 --seq 64 --batch 2 --eval-samples 0 \
    --lr 0.003 --recompute)"

# the command line overrides the file wherever it comes, a list replacing the file's items
cfg=$(config '"steps": 400' '"ulysses": 2' '"inject": ["skip:rank=1", "size:rank=2"]' '"json": true')
for order in before after; do
    if [[ $order == before ]]; then out=$(printed train --steps 7 --inject crash:rank=3 --config "$cfg")
    else out=$(printed train --config "$cfg" --steps 7 --inject crash:rank=3); fi
    check "the command line ($order the file) overrides it: steps 7, inject [crash:rank=3]" \
        python3 -c 'import json, sys; c = json.loads(sys.argv[1])
assert (c["steps"], c["inject"], c["ulysses"], c["json"]) == (7, ["crash:rank=3"], 2, True), c' "$out"
done
check "a list's single string is a one-item list" \
    python3 -c 'import json, sys; assert json.loads(sys.argv[1])["inject"] == ["skip:rank=1"]' \
    "$(printed train --config "$(config '"inject": "skip:rank=1"')")"
check "null keeps the default" test "$(printed train --config "$(config '"ulysses": null' '"save": null')")" = \
    "$(printed train)"

# round trips: what --print-config prints, --config reads back to the same options (every command's defaults,
# and a train of every kind of option set: numbers, strings, flags, a list)
for cmd in train eval plan selftest viz calibrate postmortem; do
    "$usp" $cmd --print-config >"$work/a.json" 2>&1
    "$usp" $cmd --config "$work/a.json" --print-config >"$work/b.json" 2>&1
    check "usp $cmd: --print-config, read back with --config, prints the same" cmp -s "$work/a.json" "$work/b.json"
done
"$usp" train --world 8 --ulysses 2 --ring 2 --lr 0.30000000000000004 --timeout 1e-7 --save "$work/ck" --pad \
    --inject skip:rank=1 --inject 'size:rank=2,op=all_to_all' --zero 2 --dtype bf16 --print-config >"$work/a.json"
"$usp" train --config "$work/a.json" --print-config >"$work/b.json"
check "usp train with options of every kind: --print-config read back prints the same" \
    cmp -s "$work/a.json" "$work/b.json"
check "--print-config keeps 0.30000000000000004 whole (17 digits)" \
    grep -q '"lr": 0.30000000000000004' "$work/a.json"
check "--print-config prints 0.003 as 0.003" grep -q '"lr": 0.003,' <(printed train --lr 0.003)
check "--print-config lists every option, in the table's order, the unset ones as null (--steps too: 4000, or 1 with --explore)" \
    python3 -c 'import json, sys; c = json.load(open(sys.argv[1]))
keys = list(c); assert keys[:3] == ["backend", "world", "gpus"] and keys[-1] == "tile-rows", keys
assert c["gpus"] is None and c["warmup"] is None and c["steps"] is None and c["meta"] is False, c' "$work/a.json"

# --print-config runs nothing: no checkpoint, no trace, exit 0
expect 0 '"save": "'"$work/ck"'"' -- train --steps 2 --save "$work/ck" --trace "$work/t.json" --print-config
check "--print-config wrote no checkpoint and no trace" test ! -e "$work/ck" -a ! -e "$work/t.json"
expect 0 '"dot": null' -- postmortem --print-config
expect 0 "usage: usp train" -- train --config "$work/missing.json" --help

# bad files: exit 2 naming the file, the key, the value and what would work
expect 2 "--config $work/missing.json: cannot read it: No such file or directory" -- train --config "$work/missing.json"
expect 2 "--config $work: cannot read it: Is a directory" -- train --config "$work"
echo '{"steps": 3,' >"$work/cut.json"
expect 2 "--config $work/cut.json: not JSON at line 2, column 0: string or '}' expected near end of file" -- \
    train --config "$work/cut.json"
echo '[{"steps": 3}]' >"$work/list.json"
expect 2 "--config $work/list.json: an array, not an object; expected the options as one" -- \
    train --config "$work/list.json"
cfg=$work/c.json
config '"stpes": 3' >/dev/null
expect 2 "--config $cfg: \"stpes\": not an option of usp train; did you mean \"steps\"?" -- train --config "$cfg"
config '"--steps": 3' >/dev/null
expect 2 "\"--steps\": keys are the option names without their dashes: \"steps\"" -- train --config "$cfg"
config '"steps": "3"' >/dev/null
expect 2 "--config $cfg: \"steps\": \"3\" is a string; expected a whole number, e.g. \"steps\": 4" -- \
    train --config "$cfg"
config '"steps": 2.5' >/dev/null
expect 2 "\"steps\": 2.5 is a real number; expected a whole number" -- train --config "$cfg"
config '"lr": "fast"' >/dev/null
expect 2 "\"lr\": \"fast\" is a string; expected a number, e.g. \"lr\": 0.001" -- train --config "$cfg"
config '"save": 3' >/dev/null
expect 2 "\"save\": 3 is a whole number; expected a string, e.g. \"save\": \"DIR\"" -- train --config "$cfg"
config '"recompute": 1' >/dev/null
expect 2 "\"recompute\": 1 is a whole number; expected true or false" -- train --config "$cfg"
config '"inject": ["skip:rank=1", 3]' >/dev/null
expect 2 "\"inject\": item 2 is a whole number; expected an array of strings" -- train --config "$cfg"
config '"inject": {"kind": "skip"}' >/dev/null
expect 2 "\"inject\": {\"kind\": \"skip\"} is an object; expected a string or an array of strings" -- \
    train --config "$cfg"
# the bounds and checks of the command line, with its message
config '"zero": 7' >/dev/null
expect 2 "--config $cfg: \"zero\": --zero 7: out of range; expected 0 to 3" -- train --config "$cfg"
expect 2 "--zero 7: out of range; expected 0 to 3" -- train --zero 7
config '"steps": 5000000000' >/dev/null
expect 2 "\"steps\": --steps 5000000000: out of range; expected 0 to 1073741824" -- train --config "$cfg"
config '"save": ""' >/dev/null
expect 2 "\"save\": --save: the value is empty" -- train --config "$cfg"
config '"steps": 3' >/dev/null
refused="--steps is an option of usp train: usp eval runs no training step"
expect 2 "--config $cfg: \"steps\": $refused" -- eval --config "$cfg"
expect 2 "$refused" -- eval --steps 3
config '"config": "other.json"' >/dev/null
expect 2 "\"config\": a config file does not name another" -- train --config "$cfg"
config '"print-config": true' >/dev/null
expect 2 "\"print-config\": not an option of a file: give --print-config on the command line" -- train --config "$cfg"
echo '{"steps": 3, "steps": 4}' >"$cfg"
expect 2 "not JSON at line 1, column 20: duplicate object key" -- train --config "$cfg"
# and on the command line
expect 2 "--config $cfg after --config $cfg: one config file a run" -- train --config "$cfg" --config "$cfg"
expect 2 "--config needs a value (--config FILE)" -- train --config
expect 2 "--print-config takes no value" -- train --print-config=yes
expect 2 "--lr inf: --print-config writes JSON, which has no infinite or NaN numbers" -- train --lr inf --print-config

finish cli_config
