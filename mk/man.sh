#!/bin/sh
# Writes the manual pages into DIR from the programs' own --help texts (so a
# page says what --help says): mesh.1 (the commands), mesh-CMD.1 for each
# command, meshd.8.  Usage: mk/man.sh BUILD DIR VERSION
set -e
b=$1 dir=$2 version=$3
mkdir -p "$dir"
# roff from plain text on stdin: a preformatted body, with roff's own
# characters made literal (a leading . or ', and backslashes).
body() {
	printf '.nf\n'
	sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"
	printf '.fi\n'
}
page() { # page NAME SECTION SUMMARY < help text
	printf '.TH %s %s "" "mesh %s" "mesh"\n.SH NAME\n%s \\- %s\n.SH DESCRIPTION\n' \
		"$(echo "$1" | tr a-z A-Z)" "$2" "$version" "$1" "$3"
	body
	printf '.SH SEE ALSO\n'
	[ "$1" = mesh ] || printf '.BR mesh (1),\n'
	printf '.BR meshd (8)\n'
}
"$b/mesh" help | page mesh 1 "run compute work on workers that hold expensive resources only while there is work" >"$dir/mesh.1"
"$b/mesh" help | sed -n 's/^  \([a-z][a-z]*\)  *\(.*\)/\1	\2/p' | while IFS='	' read -r cmd summary; do
	case $cmd in help | version) continue ;; esac
	"$b/mesh" "$cmd" --help | page "mesh-$cmd" 1 "$summary" >"$dir/mesh-$cmd.1"
done
"$b/meshd" --help | page meshd 8 "the mesh daemon: hosts workers, runs jobs, serves the model gateway" >"$dir/meshd.8"
