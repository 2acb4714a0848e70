#!/bin/sh
# Embeds `mesh ui`'s files (src/ui/assets and its vendor/) in C, for the
# build: each file's bytes as an array, and the table ui/ui.h declares
# (its base name and a Content-Type by its extension).  od and awk alone.
# Usage: mk/asset2c.sh DIR > FILE.c
set -e
dir=$1
echo "/* Made by mk/asset2c.sh from $dir: edit the files there, not this. */"
echo '#include "ui/ui.h"'
echo
i=0
list=$(find "$dir" -maxdepth 2 -type f ! -name README ! -name '*.md' | LC_ALL=C sort)
for f in $list; do
	echo "static const unsigned char a$i[] = {"
	od -An -v -tx1 "$f" | awk '{ s = "\t"; for (k = 1; k <= NF; k++) s = s "0x" $k ","; print s }'
	echo "0};"
	i=$((i + 1))
done
echo
echo 'const struct mesh_ui_asset mesh_ui_assets[] = {'
i=0
for f in $list; do
	b=$(basename "$f")
	case "$b" in
	*.html) t='text/html; charset=utf-8' ;;
	*.js) t='text/javascript; charset=utf-8' ;;
	*.css) t='text/css; charset=utf-8' ;;
	*.svg) t='image/svg+xml' ;;
	*.png) t='image/png' ;;
	*.ico) t='image/x-icon' ;;
	*.json) t='application/json' ;;
	*) t='text/plain; charset=utf-8' ;;
	esac
	echo "	{\"$b\", \"$t\", a$i, sizeof a$i - 1},"
	i=$((i + 1))
done
echo '	{0, 0, 0, 0},'
echo '};'
echo "const size_t mesh_ui_nassets = $i;"
