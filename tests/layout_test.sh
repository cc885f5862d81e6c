#!/usr/bin/env bash
# scripts/check_layout.sh on a small tree of its own: two rooms, low and high, and a map on which low
# may use nothing and high may use low. The tree passes as built; a lower room that uses a higher one
# is refused, whether by a call (nm) or by an include alone; so are a folder with code that the map
# lacks, and a map whose rooms are not ARCHITECTURE.md's. Usage: layout_test.sh (gcc and git on PATH).
set -uo pipefail
script=$(cd "$(dirname "$0")/.." && pwd)/scripts/check_layout.sh
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
cd "$tree" || exit 1
git init -q .
failed=0
checks=0

# build: every .c of the tree compiled as the project's build lays its objects out
build()
{
    rm -rf build
    for src in $(git ls-files '*.c'); do
        mkdir -p "build/$(dirname "$src")/CMakeFiles/t.dir"
        gcc -c -I. "$src" -o "build/$(dirname "$src")/CMakeFiles/t.dir/$(basename "$src").o" || exit 1
    done
}

# expect RC TEXT LABEL: check_layout on the tree exits RC, its output containing TEXT
expect()
{
    build
    local out rc
    out=$("$script" build "$tree" 2>&1)
    rc=$?
    checks=$((checks + 1))
    if [[ $rc -ne $1 || $out != *"$2"* ]]; then
        echo "FAIL: $3: exit $rc (expected $1), looked for '$2' in:"
        sed 's/^/    /' <<<"$out"
        failed=$((failed + 1))
    fi
}

mkdir -p low high docs
printf '/* A low room. */\nint low_value(void) { return 1; }\n' >low/low.c
printf '/* What the high room offers. */\nint high_value(void);\n' >high/high.h
printf '#include "high/high.h"\nint low_value(void);\nint high_value(void) { return low_value() + 1; }\n' >high/high.c
printf '# test map\nlow -\nhigh low\n' >docs/rooms.map
git add -A
expect 0 "0 rule(s) broken" "high uses low, as the map allows"

printf '#include "high/high.h"\nint low_value(void) { return high_value() - 1; }\n' >low/low.c
git add -A
expect 1 "low uses high (the map lets it use: -)" "low calls high and includes its header"

printf '#include "high/high.h"\nint low_value(void) { return 1; }\n' >low/low.c
git add -A
expect 1 "low uses high" "low includes a header of high and calls nothing of it"

printf 'int low_value(void) { return 1; }\n' >low/low.c
mkdir -p side
printf 'int side_value(void) { return 3; }\n' >side/side.c
git add -A
expect 1 "rooms with code that docs/rooms.map does not list" "a folder with code the map lacks"

printf '# test map\nlow -\nhigh low\nside -\n' >docs/rooms.map
printf '# rooms\n\n## Rooms\n\n```\nlow/   a room\nhigh/  a room\n```\n' >docs/ARCHITECTURE.md
git add -A
expect 1 "docs/ARCHITECTURE.md's rooms (<) and docs/rooms.map's (>) differ" "a room on the map the page lacks"

printf '# rooms\n\n## Rooms\n\n```\nlow/   a room\nhigh/  a room\nside/  a room\n```\n' >docs/ARCHITECTURE.md
git add -A
expect 0 "0 rule(s) broken" "the map and the page name the same rooms"

echo "layout: $((checks - failed)) passed, $failed failed"
[[ $failed -eq 0 ]]
