# The cases of tests/parity/parity.sh (sourced by it): c FLAGS INPUT ARGS [AFTER]
# for an equal case, dc OPTION FLAGS INPUT ARGS [AFTER] for a documented
# difference (see parity.sh).  $N is /dev/null, $W the work directory with
# the input files, $A a script that prints each argument as [arg].
# ::: lists, their cross product, linked lists
c s $N 'echo ::: a b c'
c s $N 'echo {} ::: a b c'
c s $N 'echo x{}y ::: a b'
c s $N 'echo ::: a b ::: 1 2'
c s $N 'echo {1}-{2} ::: a b ::: 1 2'
c s $N 'echo {2} {1} ::: a b ::: 1 2 3'
c s $N 'echo ::: a b c :::+ 1 2 3'
c s $N 'echo {1}{2} ::: a b c :::+ 1 2'
c s $N "$A {} ::: a b ::: 1"
# an empty ::: or :::: among several: one empty argument
c s $N 'echo ::: a b :::'
c s $N 'echo x{1}y{2}z ::: ::: a b'
c s $N 'echo {1}-{2} ::: a b c :::+'
c s $N "echo x :::: $W/empty ::: a"
c s $N 'echo ::: :::'
# :::: files, -a, standard input
c s $N "echo :::: $W/f1"
c s $N "echo {} :::: $W/f1 :::: $W/f2"
c s $N "-a $W/f1 echo"
c s $N "-a $W/f1 -a $W/f2 echo {2} {1}"
c s "$W/f1" 'echo'
c s "$W/f1" 'echo _{}_' 
c s "$W/f1" '-a - echo'
c s "$W/empty" 'echo'
# column separators, -0, -d
c s "$W/csv" '--colsep , echo {2} {1}'
c s "$W/csv" '--colsep , echo'
c s "$W/tsv" "--colsep '\\t' echo {1}:{2}"
c s "$W/csv" '--colsep , echo {3}x'
c s "$W/nul" '-0 echo'
c s "$W/nul" "--null $A {}"
c s "$W/commas" '-d , echo'
# replacement strings
c s $N 'echo {.} ::: a.txt b.tar.gz c'
c s $N 'echo {/} ::: /a/b.txt c/d e'
c s $N 'echo {//} ::: /a/b.txt c/d e'
c s $N 'echo {/.} ::: /a/b.txt c/d.x.y e'
c s $N 'echo {#} ::: a b c'
c s $N 'echo {#}-{} ::: a b c'
c s $N 'echo {1.} {2/} ::: a.b ::: c/d'
c s $N 'echo {x} {} ::: a'
c s $N "$A {3} {1} ::: a b ::: 1 2"
c s $N '-j1 echo {%} ::: a b'
# shell command lines
c s $N "'echo {} | tr a-z A-Z' ::: ab cd"
c s $N "::: 'echo 1' 'echo 2'"
c s "$W/cmds" ''
c s $N "--dry-run echo {} ::: a b"
# exit codes
c s $N "'exit {}' ::: 0 1 2"
c s $N "'exit {}' ::: 0 0"
c s $N 'false ::: 1 2 3 4 5'
c s $N "'exit 1' ::: \$(seq 105)"
c s $N "--retries 2 'exit 1' ::: a"
c s $N "--timeout 2 'sleep {}' ::: 0 30"
# options that do not change the output
c s $N '--jobs=2 echo ::: a b'
c s $N '-j 200% echo ::: a b'
c s $N '-j +1 echo ::: a b'
c s $N '-j -1 echo ::: a b'
c s $N '-j 0 echo ::: a b'
c s $N '-u echo ::: a b'
c s $N '--line-buffer echo ::: a b'
c k $N '-j1 -k echo ::: c b a'
# order, tags and halting
c k $N "-k 'sleep {}; echo {}' ::: 0.3 0.1 0.2"
c k $N "-k -j4 echo {#} ::: a b c d e f g h"
c s $N '--tag echo {} ::: a b'
c s $N '--tag echo ::: a b ::: 1 2'
c s $N "--halt now,fail=1 'sleep {}; exit 3' ::: 0.1 1"
c s $N "--halt soon,fail=1 -j1 'exit {}' ::: 4 0"
c s $N "--halt now,success=1 'sleep {}; echo {}' ::: 0.1 1"
c s $N "--halt 2 -j1 'exit {}' ::: 0 5 0"
# several records a command: -N, -n, -m, -X, --xargs (-j given: -m and -X
# spread the records over the slots)
c k $N '-k -N2 echo ::: a b c d e'
c k $N '-k -N2 echo {} / {1} / {2} ::: a b c d e'
c k $N '-k -n2 echo ::: a b c d e'
c k $N "-k -N3 $A {3} {1} {} ::: a b c d"
c k "$W/f1" '-k -N2 echo'
c k "$W/csv" '-k --colsep , -N2 echo {1} {3} {4}'
c k $N "-k -N2 'echo {1}-{2}' ::: a b c d"
c k $N '-k -j4 -m echo ::: 1 2 3 4 5 6 7 8 9 10'
c k $N '-k -j2 -m echo pre{}post ::: a b c'
c k $N '-k -j2 -X echo pre{}post ::: a b c'
c k $N "-k -j2 -X $A x{}y {} ::: a b c"
c k $N "-k -j2 -X 'echo x{}y {1}' ::: a b c"
c k $N '-k -j4 --xargs echo ::: 1 2 3 4 5 6 7 8 9 10'
c k $N "-k -j1 -X echo {#}:{} ::: \$(seq 300)"
# --pipe: blocks of records on standard input
c k "$W/seq10" '-k --pipe -N3 wc -l'
c k "$W/seq100k" '-k --pipe --block 100k wc -l'
c k "$W/seq100k" '-k --pipe --block 100K wc -l'
c s "$W/seq100k" '--pipe --block 64k -j4 md5sum'
c k "$W/f1" "-k --pipe -N2 'echo {#}; cat'"
# option by option, in the man page's order: each spelling of each option
# mesh runs as GNU parallel does
c s "$W/nul" '--null echo'
c s $N "--arg-file $W/f1 echo"
c s $N "--arg-file=$W/f2 echo x{}"
c s "$W/f1" "-a - -a $W/f2 echo"
c s "$W/csv" '-C , echo {2}'
c s "$W/commas" '--delimiter , echo x{}'
c s "$W/commas" "-d ',' echo"
c s "$W/f1" "-d 'a' echo"
c s $N '--bar echo ::: a b'
c s $N '--progress echo ::: a b'
c s $N '--eta echo ::: a b'
c k $N '-k --delay 0.1 echo ::: a b c'
c k $N '-k --delay=0.05s echo ::: a b'
c s $N '--load 100 echo ::: a b'
c s $N '--load=50 echo ::: a'
c s $N '--memfree 1M echo ::: a b'
c s $N '--memfree=1k echo ::: a'
c s $N "--nice 5 'nice; echo {}' ::: a"
c s $N '--nice=1 echo ::: a'
c s $N '--tmpdir /tmp echo ::: a b'
c s $N '--tmpdir=/tmp echo ::: a'
c k $N '-k --dry-run echo {} {.} ::: a.x b'
c k $N '--keep-order -j2 echo ::: 3 2 1'
c k $N "--keep-order 'sleep {}; echo {}' ::: 0.2 0.1"
c s $N '--ungroup echo ::: a b'
c s $N '--tag echo x ::: a'
c k $N '-k --tag -j1 echo ::: 1 2'
c k $N "-k --line-buffer 'echo {}; echo {}' ::: a b"
c s $N "--joblog log 'exit {}' ::: 0 2" 'cut -f 1,7,8 log | sort'
c s $N "--joblog=log echo ::: a" 'cut -f 1,8 log'
c s $N "--halt=now,fail=1 -j1 'exit {}' ::: 0 7 0"
c s $N "--halt 1 -j1 'exit {}' ::: 0 3 0"
c s $N "--halt never 'exit {}' ::: 0 3"
c s $N "--halt 0 'exit {}' ::: 0 3 4"
c s $N "--halt -1 -j1 'exit {}' ::: 3 0 4"
c s $N "--halt soon,success=2 -j1 'exit {}' ::: 1 0 0 0"
c s $N "--retries=3 'exit 2' ::: a b"
c s $N "--timeout=2 'sleep {}; echo {}' ::: 0 30"
c s $N "--timeout 2s 'sleep {}; echo {}' ::: 0 30"
c s $N '--max-args 2 echo ::: a b c'
c s $N '--max-args=3 echo ::: 1 2 3 4'
c s $N '--max-replace-args 2 echo {2}{1} ::: a b c d'
c s $N '--max-replace-args=1 echo x{}y ::: a b'
c s $N '-n 1 echo ::: a b'
c k $N '-k -N 3 echo {3} ::: a b c d e f'
c k $N '-k -j2 -m echo ::: a b c d'
c k $N '-k -j1 -m echo ::: a b c d'
c k $N '-k -j3 -X echo x{} ::: a b c d e f'
c k $N '-k --xargs -j1 echo ::: 1 2 3'
c k "$W/seq10" '-k --pipe --block-size 5 wc -l'
c k "$W/seq10" '-k --pipe --block=6 cat'
c k "$W/seq10" "-k --pipe --block-size=1k -N4 'wc -l'"
c s $N '-j 1 echo ::: a b'
c s $N '-j3 echo ::: a b c d'
c s $N '--jobs 50% echo ::: a'
# documented differences
dc -v s $N '-v echo ::: a'
dc --help s $N '--help'
dc -h s $N '-h'
dc --results s $N "--results out echo ::: a" 'find out -type f | sort'
