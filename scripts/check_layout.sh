#!/usr/bin/env bash
# The layout's rules, measured on a build (docs/ARCHITECTURE.md, "Rules of the house"):
#   1. no cycle between files: A -> B when an object of A uses a symbol that B's object
#      defines (nm over the build; tests left out);
#   2. no cycle between rooms (a room is a folder): the arrows of 1, and the includes of
#      every source and header, between folders;
#   3. no arrow of 2 that docs/rooms.map does not allow (the machine-readable copy of
#      docs/ARCHITECTURE.md's "uses:" lines), no folder with code that the map lacks, and
#      the map and ARCHITECTURE.md's rooms name the same rooms;
#   4. no source file over 600 lines, no function over 80 (from its opening brace at
#      column 0 to its closing one).
# Usage: scripts/check_layout.sh [BUILD_DIR [TREE]]   (default build/test, and this checkout; the
# build must be built, BUILD_DIR relative to TREE; TREE a git checkout with docs/rooms.map)
# Exit 0 when every rule holds, 1 with each breach listed, 2 on a missing build or map.
set -euo pipefail
cd "${2:-$(dirname "$0")/..}"
build=${1:-build/test}
if [[ ! -d $build ]] || ! find "$build" -name '*.c.o' -print -quit | grep -q .; then
    echo "check_layout: no objects under '$build': build it first (cmake --build $build)" >&2
    exit 2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
breaches=0

# Objects of the project's own sources: build/x/DIR/CMakeFiles/TARGET.dir/SUB/f.c.o
# is the unit DIR/SUB/f.c. Tests and CMake's probes are no rooms.
find "$build" -name '*.o' -path '*/CMakeFiles/*.dir/*' | sort | while read -r obj; do
    unit=${obj#"$build"/}
    unit=$(sed -E 's#CMakeFiles/[^/]+\.dir/##; s#\.o$##' <<<"$unit")
    case $unit in tests/* | CMakeFiles/*) continue ;; esac
    [[ -f $unit ]] || continue
    nm -P -g --defined-only "$obj" | awk -v u="$unit" '$2 ~ /^[TDBRVW]$/ && $1 != "main" {print $1, u}' >>"$work/defs"
    nm -P -u "$obj" | awk -v u="$unit" '{print u, $1}' >>"$work/uses"
done
sort -u -k1,1 -k2,2 "$work/defs" -o "$work/defs"
# A symbol defined by several objects (one kernel built for several instruction sets)
# ties the user to each of them.
sort -k2,2 "$work/uses" | join -1 2 -2 1 -o 1.1,2.2 - "$work/defs" | awk '$1 != $2' | sort -u >"$work/file_arrows"

# tsort lists a loop on standard error; a loop-free input gives none.
cycles() { tsort "$1" 2>&1 >/dev/null | grep -v 'input contains a loop' || true; }

loop=$(cycles "$work/file_arrows")
if [[ -n $loop ]]; then
    echo "files in a cycle (nm):"; sed 's/^tsort: /  /' <<<"$loop"
    breaches=$((breaches + 1))
fi

# Includes, resolved from the project's root, then from the including file's folder.
git ls-files '*.c' '*.h' '*.cu' '*.cuh' | grep -v '^tests/' | while read -r src; do
    sed -nE 's/^#include "([^"]+)".*/\1/p' "$src" | while read -r inc; do
        if [[ -f $inc ]]; then echo "$src $inc"; elif [[ -f $(dirname "$src")/$inc ]]; then echo "$src $(dirname "$src")/$inc"; fi
    done
done >"$work/include_arrows"
cat "$work/file_arrows" "$work/include_arrows" |
    awk '{a = $1; b = $2; sub(/\/[^\/]+$/, "", a); sub(/\/[^\/]+$/, "", b); if (a != b) print a, b}' |
    sort -u >"$work/room_arrows"
loop=$(cycles "$work/room_arrows")
if [[ -n $loop ]]; then
    echo "rooms in a cycle (nm and includes):"; sed 's/^tsort: /  /' <<<"$loop"
    breaches=$((breaches + 1))
fi

# The map: "ROOM USES..." lines (docs/rooms.map); an arrow A -> B is allowed when B is A, is listed for A,
# matches a listed "P/*" (a room under P), or A lists "*".
map=docs/rooms.map
if [[ ! -f $map ]]; then
    echo "check_layout: no $map in $PWD: the rooms and what each may use" >&2
    exit 2
fi
unmapped=$(awk 'NR == FNR { if ($0 !~ /^#/ && NF) on[$1] = 1; next }
                { if (!($1 in on)) print "  " $1 }' "$map" \
           <(git ls-files '*.c' '*.h' '*.cu' '*.cuh' | grep -v '^tests/' | sed -E 's#/[^/]+$##' | sort -u))
if [[ -n $unmapped ]]; then
    echo "rooms with code that $map does not list (add each there and to docs/ARCHITECTURE.md's rooms):"
    echo "$unmapped"
    breaches=$((breaches + 1))
fi
forbidden=$(awk 'NR == FNR { if ($0 !~ /^#/ && NF) { for (i = 2; i <= NF; i++) uses[$1] = uses[$1] " " $i }; next }
    function allowed(a, b,   n, u, i) {
        n = split(uses[a], u, " ")
        for (i = 1; i <= n; i++)
            if (u[i] == "*" || u[i] == b || (u[i] ~ /\/\*$/ && index(b, substr(u[i], 1, length(u[i]) - 1)) == 1))
                return 1
        return 0
    }
    ($1 in uses) && !allowed($1, $2) { print "  " $1 " uses " $2 " (the map lets it use:" uses[$1] ")" }' \
    "$map" "$work/room_arrows")
if [[ -n $forbidden ]]; then
    echo "arrows between rooms that $map does not allow (a lower room using a higher one, or a use the map and"
    echo "docs/ARCHITECTURE.md have not taken in):"
    echo "$forbidden"
    breaches=$((breaches + 1))
fi
# The rooms of ARCHITECTURE.md: the lines of its rooms block that begin with a folder ("core/ops/   ...").
if [[ -f docs/ARCHITECTURE.md ]]; then
    differ=$(diff <(awk '/^## Rooms/ { in_rooms = 1 } in_rooms && /^```/ { fence++; next }
                         in_rooms && fence == 1 && $1 ~ /\/$/ { sub(/\/$/, "", $1); print $1 } fence == 2 { exit }' \
                        docs/ARCHITECTURE.md | sort) \
                  <(awk '$0 !~ /^#/ && NF { print $1 }' "$map" | grep -v -e '^bench$' -e '^tutorials/' | sort) || true)
    if [[ -n $differ ]]; then
        echo "docs/ARCHITECTURE.md's rooms (<) and $map's (>) differ:"; sed 's/^/  /' <<<"$differ"
        breaches=$((breaches + 1))
    fi
fi

long=$(git ls-files '*.c' '*.h' '*.cu' '*.cuh' '*.sh' | xargs wc -l | awk '$2 != "total" && $1 > 600 {print "  " $2 ": " $1 " lines"}')
if [[ -n $long ]]; then
    echo "files over 600 lines:"; echo "$long"
    breaches=$((breaches + 1))
fi
# A function opens with "{" at column 0 after a line that ends its signature with ")".
long=$(git ls-files '*.c' '*.cu' | xargs awk '
    /^\{/ && previous ~ /\)[ \t]*$/ { start = FNR; name = previous }
    /^\}/ && start { if (FNR - start + 1 > 80) printf "  %s:%d: %d lines: %s\n", FILENAME, start, FNR - start + 1, name; start = 0 }
    { previous = $0 }')
if [[ -n $long ]]; then
    echo "functions over 80 lines:"; echo "$long"
    breaches=$((breaches + 1))
fi

rooms=$(awk '{print $1; print $2}' "$work/room_arrows" | sort -u | wc -l)
echo "layout: $(wc -l <"$work/file_arrows") file arrows (nm), $(wc -l <"$work/room_arrows") room arrows between $rooms rooms; $breaches rule(s) broken"
[[ $breaches -eq 0 ]]
