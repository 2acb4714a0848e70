#!/bin/sh
# Embeds the PostgreSQL store's SQL (src/store/sql) in C, for the build:
# the schema steps NNN.sql in order, then functions.sql, as C strings
# (each line a literal; backslashes and quotes escaped).  The number of
# steps must be the schema version (store/store_pg.h): the compiler says
# so otherwise.  Usage: mk/sql2c.sh DIR > FILE.c
set -e
dir=$1
lit() {
	sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/\t"/' -e 's/$/\\n"/' "$1"
}
echo "/* Made by mk/sql2c.sh from $dir: edit the .sql files, not this. */"
echo '#include "store/store_pg.h"'
echo '#include "store/store_pg_sql.h"'
echo
echo 'const char *const mesh__pg_steps[] = {'
for f in "$dir"/[0-9][0-9][0-9].sql; do
	echo "	/* $(basename "$f") */"
	lit "$f"
	echo '	,'
done
echo '};'
echo '_Static_assert(sizeof mesh__pg_steps / sizeof mesh__pg_steps[0] == MESH_PG_SCHEMA_VERSION,'
echo '	       "src/store/sql has a step file NNN.sql for each schema version up to MESH_PG_SCHEMA_VERSION");'
echo
echo 'const char mesh__pg_functions[] ='
lit "$dir/functions.sql"
echo '	;'
