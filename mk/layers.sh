#!/bin/sh
# The module order of docs/DESIGN.md, checked on the code: a module may
# use those listed above it in the "Modules" table, never those below.
# An #include of a lower module's header fails, and so does a call: an
# undefined symbol of an object that an object of a lower module defines.
# Every directory of src/ must be a row of the table.  meshd's core and
# jobs build no JSON (its API renders it).
# Usage: mk/layers.sh BUILD   (from the source tree, after a build)
BUILD=${1:-build}
design=docs/DESIGN.md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The modules in order: the first column of the table under "## Modules".
awk '/^## Modules/ {on = 1; next} on && /^## / {exit}
     on && /^\| `[a-z\/]+\/` \|/ {m = $2; gsub(/[`|]/, "", m); sub(/\/$/, "", m); print NR, m}' "$design" >"$tmp/ranks"
[ -s "$tmp/ranks" ] || { echo "layers: no module table in $design" >&2; exit 2; }

find src -name '*.[ch]' | sort >"$tmp/files"
# Directories that are no row; includes of a lower module.
sed 's|^src/||; s|/[^/]*$||' "$tmp/files" | sort -u | awk 'NR == FNR {r[$2] = 1; next}
	!($0 in r) {print "layers: src/" $0 "/ is not a row of the module table"}' "$tmp/ranks" - >"$tmp/out"
xargs grep -Hn '^#include "[a-z_/]*\.h"' <"$tmp/files" | awk -v design="$design" '
	NR == FNR {r[$2] = $1; next}
	{
		split($0, p, ":"); f = p[1]; own = f; sub(/^src\//, "", own); sub(/\/[^\/]*$/, "", own)
		inc = $0; sub(/^[^"]*"/, "", inc); sub(/".*$/, "", inc)
		dir = inc; sub(/\/[^\/]*$/, "", dir)
		if ((dir in r) && (own in r) && r[dir] > r[own])
			print "layers: " f ":" p[2] " includes " inc ": " dir "/ is below " own "/ in " design
	}' "$tmp/ranks" - >>"$tmp/out"

# JSON is rendered by meshd's API (and the CLI, the client, the gateway's
# OpenAI shapes, the probe's model lists), never by meshd's core or jobs.
for d in meshd/core meshd/jobs; do
	grep -Hn 'jansson\|json_' src/$d/*.[ch] | sed 's/^/layers: JSON in the core: /'
done >>"$tmp/out"

# Calls, from the built objects.
if [ -d "$BUILD/obj/src" ]; then
	# Only the objects of sources that exist (a moved file leaves its old one).
	find "$BUILD/obj/src" -name '*.o' | sort | while read -r o; do
		c=${o#"$BUILD"/obj/}
		[ -f "${c%.o}.c" ] && echo "$o"
	done >"$tmp/objs"
	xargs nm -A -g --defined-only <"$tmp/objs" 2>/dev/null |
		awk '$2 ~ /^[TDBRV]$/ {f = $1; sub(/:$/, "", f); print $3, f}' | sort -k1,1 >"$tmp/defs"
	xargs nm -A -u <"$tmp/objs" 2>/dev/null | awk '{f = $1; sub(/:$/, "", f); print $NF, f}' | sort -k1,1 >"$tmp/uses"
	join "$tmp/uses" "$tmp/defs" | awk -v b="$BUILD/obj/src/" -v design="$design" '
		function mod(f) { sub("^" b, "", f); sub(/\/[^\/]*$/, "", f); return f }
		NR == FNR {r[$2] = $1; next}
		{
			u = mod($2); d = mod($3)
			if (u != d && (u in r) && (d in r) && r[d] > r[u]) {
				f = $2; sub("^" b, "src/", f); sub(/\.o$/, ".c", f)
				print "layers: " f " calls " $1 " of " d "/, which is below " u "/ in " design
			}
		}' "$tmp/ranks" - >>"$tmp/out"
else
	echo "layers: $BUILD/obj/src is not built: calls not checked" >&2
fi
# The stores are the job engine's (docs/DESIGN.md, job/): above job/,
# what a store does goes through job/'s calls, never a store/ header or
# function.
xargs grep -Hn '^#include "store/' <"$tmp/files" | grep -v '^src/store/\|^src/job/' |
	sed 's/^/layers: a store\/ header above job\/: /' >>"$tmp/out"
if [ -s "$tmp/defs" ]; then
	join "$tmp/uses" "$tmp/defs" | awk -v b="$BUILD/obj/src/" '
		function mod(f) { sub("^" b, "", f); sub(/\/[^\/]*$/, "", f); return f }
		mod($3) == "store" && mod($2) != "store" && mod($2) != "job" {
			f = $2; sub("^" b, "src/", f); sub(/\.o$/, ".c", f)
			print "layers: " f " calls " $1 " of store/: above job/, a store is reached through job/"
		}' >>"$tmp/out"
fi
n=$(wc -l <"$tmp/out")
cat "$tmp/out"
if [ "$n" -gt 0 ]; then
	echo "layers: $n arrows run up the module order of $design" >&2
	exit 1
fi
echo "layers: $(wc -l <"$tmp/ranks") modules in order, no arrow runs up"
