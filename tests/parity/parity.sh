#!/bin/sh
# Runs the same command lines through GNU parallel and `mesh run` side by
# side and compares stdout plus the exit status (sorted unless the case is
# about order: GNU parallel's order varies too), then checks GNU parallel's
# man page option by option: every option it lists must be run by a case
# that comes out equal, or be listed in docs/run.md ("Coming from GNU
# parallel") as a difference, with its reason.  So "0 undocumented
# differences" is checked here, not claimed.
#
# A case marked with `dc OPTION` shows a documented difference: it is
# expected to differ, and OPTION must be listed as a difference in
# docs/run.md; a case that differs without that mark is an undocumented
# difference.  A docs row that says "yes" must have an equal case.
#
# Usage: tests/parity/parity.sh MESH_BINARY
#   PARITY_ONLY=TEXT   run only the cases whose command line holds TEXT
#                      (the option check is then skipped)
#   PARITY_JOBS=N      cases run at once (default: the CPUs + 1; each runs both tools)
#   PARITY_KEEP=1      keep the work directory (its path is printed)
# Output: one line per case (ok / FAIL / doc / XPASS), one per uncovered
# option, then the summary
#   parity: N cases, N equal, N documented differences, N undocumented differences;
#   options: N in GNU parallel's man page, N equal, N documented differences, N undocumented
# -- exit 0 iff both undocumented counts are 0.
MESH=${1:?usage: parity.sh MESH_BINARY}
case $MESH in /*) ;; *) MESH=$PWD/$MESH ;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
DOC=$HERE/../../docs/run.md
command -v parallel >/dev/null 2>&1 || { echo "parity: GNU parallel is not installed (mk/deps.sh test)"; exit 2; }
MAN=$(man -w parallel 2>/dev/null) || MAN=/usr/share/man/man1/parallel.1.gz
[ -r "$MAN" ] || { echo "parity: GNU parallel's man page ($MAN) is missing: the options cannot be checked"; exit 2; }
[ -r "$DOC" ] || { echo "parity: $DOC is missing"; exit 2; }
W=$(mktemp -d) || exit 2
if [ -n "${PARITY_KEEP:-}" ]; then echo "parity: work directory $W"; else trap 'rm -rf "$W"' EXIT; fi
export HOME="$W/home" LC_ALL=C
mkdir -p "$HOME/.parallel" && touch "$HOME/.parallel/will-cite"
printf 'alpha\nbeta\ngamma\n' >"$W/f1"
printf '1\n2\n' >"$W/f2"
printf 'a,b c,d\ne,f\n' >"$W/csv"
printf 'x\ty\nz\tw\n' >"$W/tsv"
printf 'a b\0c\0d\n\0' >"$W/nul"
printf 'a,b,,c' >"$W/commas"
printf 'echo one\necho two | tr o 0\n' >"$W/cmds"
: >"$W/empty"
seq 10 >"$W/seq10"
seq 100000 >"$W/seq100k"
# prints each argument as [arg] on a line of its own
printf '#!/bin/sh\nfor a; do echo "[$a]"; done\n' >"$W/args" && chmod +x "$W/args"
A="$W/args"
N=/dev/null

# GNU parallel's options, from its man page: "NAME 1" when it takes a
# value, "NAME 0" when not (an optional value counts as none).
(gzip -dc "$MAN" 2>/dev/null || cat "$MAN") | sed -n '/^\.SH "OPTIONS"/,/^\.SH "EXAMPLE/p' |
	grep '^\.IP "\\fB\\-' | sed 's/\\-/-/g' | awk '
{
	s = $0
	sub(/^\.IP "\\fB/, "", s)
	i = index(s, "\\fR")
	name = substr(s, 1, i - 1)
	val = (substr(s, i + 3) ~ /^ (\\fI|\x27|<)/) ? 1 : 0
	if (!(name in seen)) { seen[name] = val; order[++n] = name } else if (val) seen[name] = 1
}
END { for (k = 1; k <= n; k++) print order[k], seen[order[k]] }' >"$W/options"
[ -s "$W/options" ] || { echo "parity: no options found in $MAN"; exit 2; }

# docs/run.md's table "Coming from GNU parallel": the options of each row
# (`-x ...` and `--xx ...` in backquotes in the first column), "yes" rows
# in docyes, the others in docdiff when their note gives a reason, else in
# docbad.
awk -v yes="$W/docyes" -v diff="$W/docdiff" -v bad="$W/docbad" '
/^## / { on = ($0 ~ /^## Coming from GNU parallel/) ; next }
on && /^\| / && !/^\| GNU parallel/ && !/^\|--/ {
	n = split($0, col, "|")
	if (n < 4) next
	status = col[3]; note = col[4]
	gsub(/^ +| +$/, "", status); gsub(/^ +| +$/, "", note)
	c = col[2]
	while (match(c, /`[^`]*`/)) {
		tok = substr(c, RSTART + 1, RLENGTH - 2)
		c = substr(c, RSTART + RLENGTH)
		split(tok, w, " ")
		if (w[1] !~ /^-/) continue
		if (status ~ /^yes/) print w[1] > yes
		else if (note != "") print w[1] > diff
		else print w[1] > bad
	}
}' "$DOC"
touch "$W/docyes" "$W/docdiff" "$W/docbad"

VALUED=" $(awk '$2 == 1 { printf "%s ", $1 }' "$W/options")"
takes_value() { case $VALUED in *" $1 "*) return 0 ;; esac; return 1; }

# The options a case's command line gives to GNU parallel (one a line): the
# words before the command, parsed with the man page's names.
options_of() {
	eval "set -- $1"
	while [ $# -gt 0 ]; do
		w=$1
		shift
		case $w in
		:::* | --) break ;;
		--?*)
			printf '%s\n' "${w%%=*}"
			case $w in *=*) ;; *) takes_value "$w" && [ $# -gt 0 ] && shift ;; esac
			;;
		-?*)
			rest=${w#-}
			while [ -n "$rest" ]; do
				l=${rest%"${rest#?}"}
				rest=${rest#?}
				printf '%s\n' "-$l"
				if takes_value "-$l"; then
					[ -z "$rest" ] && [ $# -gt 0 ] && shift
					break
				fi
			done
			;;
		*) break ;;
		esac
	done
}

# run_case N FLAGS INPUT ARGS [AFTER [DOCOPT]]: both tools run ARGS in
# directories of their own with INPUT on stdin; AFTER (a shell command, in
# that directory) adds what it prints to the output (a joblog, a results
# tree).  FLAGS: s compare sorted, k in order.
run_case() {
	d="$W/c$1"
	mkdir -p "$d/p" "$d/m"
	(cd "$d/p" && eval "parallel $4" <"$3" >"$d/p.out" 2>"$d/p.err"; echo "exit $?" >>"$d/p.out"; [ -z "$5" ] || eval "$5" >>"$d/p.out" 2>&1) &
	(cd "$d/m" && eval "\"$MESH\" run $4" <"$3" >"$d/m.out" 2>"$d/m.err"; echo "exit $?" >>"$d/m.out"; [ -z "$5" ] || eval "$5" >>"$d/m.out" 2>&1)
	wait
	# a failed run keeps its journal and lock dir: remove the lock dir
	sed -n 's/.*mesh job status [^ ]* \(\/tmp\/mesh-run-[0-9a-f]*\) .*/\1/p' "$d/m.err" | while read -r l; do
		rm -rf "$l"
	done
	case $2 in *s*) sort "$d/p.out" -o "$d/p.out"; sort "$d/m.out" -o "$d/m.out" ;; esac
	options_of "$4" >"$d/options"
	if cmp -s "$d/p.out" "$d/m.out"; then
		if [ -n "$6" ]; then
			echo "XPASS $1: $4 (the documented difference of $6 did not show: make it an equal case)"
			echo xpass >"$d/verdict"
		else
			echo "ok    $1: $4"
			echo equal >"$d/verdict"
		fi
	elif [ -n "$6" ] && grep -qx -- "$6" "$W/docdiff"; then
		echo "doc   $1: $4 ($6: a difference docs/run.md gives)"
		echo doc >"$d/verdict"
	else
		if [ -n "$6" ]; then
			echo "FAIL  $1: $4 ($6 is not listed as a difference in docs/run.md)"
		else
			echo "FAIL  $1: $4"
		fi
		diff "$d/p.out" "$d/m.out" | sed 's/^/      /' | head -20
		echo differ >"$d/verdict"
	fi >"$d/line"
}

JOBS=${PARITY_JOBS:-$(($(nproc 2>/dev/null || echo 2) + 1))}
# A pool of JOBS cases: a case takes a token from the fifo before it starts
# and puts it back when it ends, so a slow case (a --timeout, 105 jobs)
# holds one place, not a whole batch.
mkfifo "$W/pool" && exec 9<>"$W/pool" || exit 2
k=0
while [ "$k" -lt "$JOBS" ]; do
	echo >&9
	k=$((k + 1))
done
# start N FLAGS INPUT ARGS AFTER DOCOPT: run_case in the pool.
start() {
	read -r _ <&9
	{
		run_case "$@" 9>&-
		echo >&9
	} &
}
n=0
# c FLAGS INPUT ARGS [AFTER]: an equal case.
c() {
	n=$((n + 1))
	case $3 in *"${PARITY_ONLY:-}"*) ;; *) return ;; esac
	start "$n" "$1" "$2" "$3" "${4:-}" ""
}
# dc OPTION FLAGS INPUT ARGS [AFTER]: a case that shows a documented
# difference of OPTION.
dc() {
	n=$((n + 1))
	case $4 in *"${PARITY_ONLY:-}"*) ;; *) return ;; esac
	start "$n" "$2" "$3" "$4" "${5:-}" "$1"
}

. "$HERE/cases.sh"
wait
exec 9>&-

# The cases' lines in their order, the counts, then (unless PARITY_ONLY)
# the man page's options against the equal cases and docs/run.md: one awk,
# not a few processes a case and an option.
awk -v n="$n" -v W="$W" -v only="${PARITY_ONLY:-}" '
function lines(f, into,   l) {
	while ((getline l < f) > 0) {
		if (into) set[l] = 1
		else print l
	}
	close(f)
}
BEGIN {
	for (k = 1; k <= n; k++) {
		d = W "/c" k
		if ((getline v < (d "/verdict")) <= 0)
			continue
		close(d "/verdict")
		lines(d "/line", 0)
		cases++
		if (v == "equal") {
			equal++
			lines(d "/options", 1)
			for (o in set) covered[o] = 1
			delete set
		} else if (v == "xpass") equal++
		else if (v == "doc") doc++
		else differ++
	}
	if (only == "") {
		lines(W "/docdiff", 1); for (o in set) docdiff[o] = 1; delete set
		lines(W "/docbad", 1); for (o in set) docbad[o] = 1; delete set
		while ((getline l < (W "/options")) > 0) {
			split(l, w, " ")
			name = w[1]
			onames++
			if (name in covered) oequal++
			else if (name in docdiff) odoc++
			else {
				oundoc++
				if (name in docbad) print "UNDOC " name ": docs/run.md lists it without a reason"
				else print "UNDOC " name ": no case runs it equal and docs/run.md does not list it as a difference"
			}
		}
		# what the docs call equal must be shown equal
		lines(W "/docyes", 1)
		for (o in set)
			if (!(o in covered)) {
				print "UNDOC " o ": docs/run.md says yes, but no case runs it equal"
				oundoc++
			}
	}
	printf "parity: %d cases, %d equal, %d documented differences, %d undocumented differences; ", cases, equal, doc, differ
	printf "options: %d in GNU parallel\047s man page, %d equal, %d documented differences, %d undocumented\n", onames, oequal, odoc, oundoc
	exit (differ == 0 && oundoc == 0) ? 0 : 1
}'
