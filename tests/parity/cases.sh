# The cases of tests/parity/parity.sh (sourced by it): c FLAGS INPUT ARGS [AFTER]
# for an equal case, dc OPTION FLAGS INPUT ARGS [AFTER] for a documented
# difference (see parity.sh).  $N is /dev/null, $W the work directory with
# the input files, $A a script that prints each argument as [arg].  Each
# case costs a start of GNU parallel (a Perl program: ~0.3 s of CPU), so
# a case should show something no other case does.

# ::: lists, their cross product, linked lists; an empty list among several
c s $N 'echo ::: a b c'
c s $N 'echo x{}y ::: a b'
c s $N 'echo ::: a b ::: 1 2'
c s $N 'echo {2} {1} ::: a b ::: 1 2 3'
c s $N 'echo ::: a b c :::+ 1 2 3'
c s $N 'echo {1}{2} ::: a b c :::+ 1 2'
c s $N 'echo ::: a b :::'
c s $N 'echo x{1}y{2}z ::: ::: a b'
c s $N 'echo {1}-{2} ::: a b c :::+'
c s $N "echo x :::: $W/empty ::: a"
c s $N 'echo ::: :::'
# :::: files, -a, standard input
c s $N "echo {} :::: $W/f1 :::: $W/f2"
c s $N "-a $W/f1 -a $W/f2 echo {2} {1}"
c s $N "--arg-file=$W/f2 echo x{}"
c s "$W/f1" 'echo _{}_'
c s "$W/f1" "-a - -a $W/f2 echo"
c s "$W/empty" 'echo'
# --link, --arg-sep, --arg-file-sep
c s $N '--link echo ::: a b c ::: 1 2'
c s $N '--xapply echo {2}{1} ::: a b ::: 1 2 3'
c s $N '--arg-sep ,, echo {1}{2} ,, a b ,,+ 1'
# a word after ::: that is one of mesh run's options: an input after --
c s $N '-- echo ::: a --timeout 10x --tag'
c s $N "--arg-file-sep // echo // $W/f2"
# column separators (columns trimmed; {} is every column), -0, -d
c s "$W/csv" '--colsep , echo {2} {1}'
c s "$W/csv" '-C , echo'
c s "$W/tsv" "--colsep '\\t' echo {1}:{2}"
c s "$W/csv" '--colsep , echo {3}x'
c s "$W/csv" "--colsep='[,b]' echo {1}-{3}"
c s $N "--colsep , echo '[{}]' '[{.}]' '[{2}]' ::: ' a.x , b.y ' 'c,d'"
c s "$W/nul" '-0 echo'
c s "$W/nul" "--null $A {}"
c s "$W/commas" '-d , echo'
c s "$W/commas" '--delimiter , echo x{}'
# replacement strings, paths ending in / and bare dots included
c s $N 'echo {.} {/.} ::: a.txt b.tar.gz c a. a.b. .x a/.x a/b.c/'
c s $N 'echo {/} {//} ::: /a/b.txt c/d e a/b/ a.b/ / // a//b ./'
c s $N 'echo {#}-{} ::: a b c'
c s $N 'echo {1.} {2/} {2//} ::: a.b ::: c/d/'
c s $N 'echo {x} {} ::: a'
c s $N "$A {3} {1} ::: a b ::: 1 2"
c s $N '-j1 echo {%} ::: a b'
# shell command lines; a replacement string that starts one is not quoted
c s $N "'echo {} | tr a-z A-Z' ::: ab cd"
c s $N "::: 'echo 1' 'echo 2'"
c s "$W/cmds" ''
c s $N "'{} | tr a-z A-Z' ::: 'echo a b'"
c s $N "'{.} x' ::: 'echo a.b'"
# -q, --quote: the command as it is
c s $N "-q echo '\$HOME' {} ::: a"
c s $N "--quote $A 'a b' {} ::: 'c d'"
# the command as GNU parallel shows it: --dry-run, the joblog's Command
c s $N "--dry-run echo {} x ::: 'a b' 'c\$d' \"e'f\" '' 'g*' '{}' 'a=b' 'x,y' '@a' '%a' '+a' 'a:b' -a"
c s $N "--dry-run 'echo {} | cat' ::: \"a'b\" 'c d'"
c k $N "-k --dry-run -X echo pre{}post ::: 'a b' c"
c k $N "-k --dry-run -N2 echo {1} {2} ::: a 'b c' d"
c s $N "--dry-run echo {.} {//} ::: 'a b/c.d'"
c s $N "--joblog log echo {} x ::: 'a b' 'c\$d'" 'cut -f 1,9 log | sort'
c s $N "--joblog log 'echo {} | cat' ::: \"a'b\"" 'cut -f 9 log'
# renamed and defined replacement strings
c s $N '-I ,, echo ,, {1} {} ::: a'
c s $N '-I {a} echo {a} {1a} {1} ::: a'
c s $N '--replace=,, echo ,, ::: a b'
c s $N '-i,, echo ,, ::: a'
c s $N '--extensionreplace EXT echo EXT {.} ::: a.b'
c s $N '--er EXT echo EXT ::: a.b'
c s $N '--basenamereplace B --dirnamereplace D --basenameextensionreplace E echo B D E ::: p/q.r'
c s $N '--bnr B --dnr D --bner E echo B D E {/} ::: x/y.z'
c s $N '--seqreplace S --slotreplace L -j1 echo S L {#} {%} ::: x'
c s $N "--rpl '{..} s:\.[^/.]+\.[^/.]+\$::' echo {..} {2..} ::: a.tar.gz b.c ::: x.y.z"
c s $N "--rpl '{x} s/a/b/g' --rpl '{u} \$_=uc(\$_)' echo {x} {2x} {u} ::: aa ::: ca"
c s $N "--rpl '{a} s/x/y/;s/y/z/' --rpl '{b} s/x/y/ || s/q/r/' echo {a} {b} ::: q x"
c s $N "--rpl '{c} tr/a-z/A-Z/' --rpl '{d} \$_ = lc' --rpl '{y} y/ab/ba/' echo {c} {d} {y} ::: aBc"
c s $N "--rpl '{e} s:(\\w+)-(\\w+):\$2-\$1:' --rpl '{f} s/A/x/gi' echo {e} {f} ::: ab-cd aAa"
c s $N "--rpl '{s} 1 \$_=\$job->seq()' --rpl '{t} \$_=total_jobs()' echo {s}-{t} ::: a b"
# exit codes
c s $N "'exit {}' ::: 0 1 2"
c s $N "'exit 1' ::: \$(seq 105)"
c s $N "--timeout 2 'sleep {}' ::: 0 30"
c s $N "--timeout=2s 'sleep {}; echo {}' ::: 0 30"
# --retries: only the last attempt's output
c s $N "--retries=3 'echo out{#}; exit 1' ::: a b"
c s $N "--retries 2 'echo {}; [ -e x{} ] && exit 0; touch x{}; exit 1' ::: a"
# slots
c s $N '--jobs=2 echo ::: a b'
c s $N '-j 200% echo ::: a b'
c s $N '-j +1 echo ::: a b'
c s $N '-j -1 echo ::: a b'
c s $N '-j 0 echo ::: a b'
c s $N '-P 2 echo ::: a b'
c s $N '--max-procs=50% echo ::: a'
# output: -u, --line-buffer, --group, -k, --tag, --tagstring
c s $N '-u echo ::: a b'
c s $N '--ungroup echo ::: a b'
c s $N "--line-buffer 'echo {}; echo {}' ::: a b"
c s $N "--lb 'echo {}; echo {}' ::: a b"
c s $N '--group echo ::: a b'
c k $N "-k 'sleep {}; echo {}' ::: 0.3 0.1 0.2"
c k $N "--keep-order -j4 echo {#} ::: a b c d e f g h"
c k $N '-k --no-keep-order echo ::: a'
c s $N '--tag echo {} ::: a b'
c s $N '--tag echo ::: a b ::: 1 2'
c s $N "--tagstring '<{}>' echo ::: a b"
c s $N "--tagstring '{#}-{1}-{%}' -j1 echo ::: a b ::: 1"
c s $N '--tag --tagstring X echo ::: a'
c k $N "-k --tagstring '{/}:' 'echo {}; echo z' ::: x/y"
# --joblog: the columns that do not vary; +FILE appends without a header
c s $N "--joblog log 'exit {}' ::: 0 2" 'cut -f 1,7,8 log | sort'
c s $N "--joblog +log echo ::: a" 'cut -f 1,7,9 log'
c s $N "--jl log echo ::: a b" 'cut -f 1 log | sort'
# --halt: when it stops, and its exit code (the failed job's status for
# fail=1 or a share that is one job, the failed share in % for N%, the
# failed count for N; 0 for success)
c s $N "--halt now,fail=1 'sleep {}; exit 3' ::: 0.1 1"
c s $N "--halt soon,fail=1 -j1 'exit {}' ::: 4 0"
c s $N "--halt now,success=1 'sleep {}; echo {}' ::: 0.1 1"
c s $N "--halt 2 -j1 'exit {}' ::: 0 5 0"
c s $N "--halt never 'exit {}' ::: 0 3"
c s $N "--halt -1 -j1 'exit {}' ::: 3 0 4"
c s $N "--halt soon,fail=2 -j1 'exit {}' ::: 3 0 4 5"
c s $N "--halt soon,fail=20% -j1 'exit {}' ::: 0 3 0 0 4 5 0 0 0 0"
c s $N "--halt soon,fail=10% -j1 'exit {}' ::: 0 3 0 0 4 5 0 0 0 0"
c s $N "--halt now,fail=30% -j1 'exit {}' ::: 0 3 0 0 4 5 0 0 0 0"
c s $N "--halt soon,fail=50% -j1 'exit {}' ::: 0 3 0 0 4 5 0 0 0 0"
c s $N "--halt soon,success=2 -j1 'exit {}' ::: 1 0 2 0 0"
c s $N "--halt now,done=1 -j1 'exit {}' ::: 3 0"
c s $N "--halt soon,done=2 -j1 'exit {}' ::: 0 4 5"
c s $N "--halt now,done=50% -j1 'exit {}' ::: 0 4 5 6"
c s $N "--halt 20% -j1 'exit {}' ::: 0 4 5 6 0"
c s $N "--halt now,fail=1 -j1 'kill -9 \$\$' ::: a"
c s $N "--halt-on-error=now,success=50% -j1 'exit {}' ::: 1 0 0 3"
# start throttles, niceness, spill directory, progress on stderr
c k $N '-k --delay 0.1 echo ::: a b c'
c s $N '--load 100 echo ::: a b'
c s $N '--memfree 1M echo ::: a b'
c s $N "--nice 5 'nice; echo {}' ::: a"
c s $N '--tmpdir /tmp echo ::: a b'
c s $N '--bar echo ::: a b'
c s $N '--progress echo ::: a b'
c s $N '--eta echo ::: a b'
# accepted: every run resumes, empty input runs nothing, citation, profiles
c s $N "--joblog log --resume echo ::: a b" 'cut -f 1 log | sort'
c s $N "--joblog log --resume-failed 'exit {}' ::: 0 1" 'cut -f 1,7 log | sort'
c s "$W/empty" '-r echo'
c s "$W/empty" '--no-run-if-empty echo'
c s $N '--silent echo ::: a'
c s $N '--verbose echo ::: a'
c s $N '--will-cite --gnu --plain echo ::: a'
# several records a command: -N, -n, -m, -X, --xargs (-j given: -m and -X
# spread the records over the slots); -N0
c k $N '-k -N2 echo {} / {1} / {2} ::: a b c d e'
c k $N '-k -n2 echo ::: a b c d e'
c k "$W/f1" '-k -N2 echo'
c k "$W/csv" '-k --colsep , -N2 echo {1} {3} {4}'
c s $N '--max-args=3 echo ::: 1 2 3 4'
c s $N '--max-replace-args 2 echo {2}{1} ::: a b c d'
c s $N '-N0 echo foo ::: 1 2 3'
c s $N '-N0 echo x{}y{1}z{#} ::: 1 2'
c s "$W/f1" '--max-replace-args 0 echo -'
c k $N '-k -j4 -m echo ::: 1 2 3 4 5 6 7 8 9 10'
c k $N '-k -j2 -m echo pre{}post ::: a b c'
c k $N '-k -j2 -X echo pre{}post ::: a b c'
c k $N "-k -j2 -X 'echo x{}y {1}' ::: a b c"
c k $N '-k -j4 --xargs echo ::: 1 2 3 4 5 6 7 8 9 10'
c k $N "-k -j1 -X echo {#}:{} ::: \$(seq 300)"
# --pipe: blocks of records on standard input
c k "$W/seq10" '-k --pipe -N3 wc -l'
c k "$W/seq100k" '-k --pipe --block 100k wc -l'
c k "$W/seq100k" '-k --pipe --block-size 100K wc -l'
c s "$W/seq100k" '--pipe --block 64k -j4 md5sum'
c k "$W/f1" "-k --pipe -N2 'echo {#}; cat'"
c k "$W/seq10" '-k --spreadstdin -N5 wc -l'
# documented differences
dc -v s $N '-v echo ::: a'
dc --help s $N '--help'
dc --results s $N "--results out echo ::: a" 'find out -type f | sort'
dc --res s $N "--res out echo ::: a" 'find out -type f | sort'
dc --tmpdir s $N '--tmpdir /nonexistent echo ::: a'
dc -i s $N '-i echo {} ::: a'
dc --replace s $N '--replace echo {} ::: a'
dc --OPTION s $N 'echo ::: a --timeout 10x'
