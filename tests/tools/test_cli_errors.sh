#!/bin/sh
# test_cli_errors.sh TOOLS_DIR [XTRAIN]: a bad command line, for every tool,
# prints one line naming what was wrong and one "see 'PROG --help'" line,
# and exits 2; --help still prints the whole usage on stdout and exits 0.
set -u
. "$(dirname "$0")/common.sh"
xtrain=${2:-}

# bad PROG PATTERN ARGS...: exit 2, two lines on stderr, the first matching
# PATTERN, the second pointing to PROG's --help; nothing on stdout.
bad() {
  prog=$1 pattern=$2
  shift 2
  "$tools/$prog" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
  code=$?
  [ $code -eq 2 ] || fail "$prog $*: exit $code, want 2"
  [ "$(wc -l <"$tmp/err")" -eq 2 ] ||
    fail "$prog $*: $(wc -l <"$tmp/err") lines on stderr, want 2: $(head -5 "$tmp/err")"
  head -1 "$tmp/err" | grep -q -- "$pattern" ||
    fail "$prog $*: first line does not say '$pattern': $(head -1 "$tmp/err")"
  [ "$(sed -n 2p "$tmp/err")" = "see '$prog --help'" ] ||
    fail "$prog $*: second line is not see '$prog --help': $(sed -n 2p "$tmp/err")"
  [ -s "$tmp/out" ] && fail "$prog $*: wrote to stdout"
}
# help PROG: --help prints the usage on stdout, exit 0.
help() {
  "$tools/$1" --help >"$tmp/out" 2>"$tmp/err"
  code=$?
  [ $code -eq 0 ] || fail "$1 --help: exit $code"
  grep -q "usage" "$tmp/out" || fail "$1 --help prints no usage"
}

bad xcoll-perf "unrecognized option '--bogus'" --bogus
bad xcoll-perf "invalid option -- 'x'" -x
bad xcoll-perf "requires an argument" -b
bad xcoll-perf "bad value 'quad' for option -d" -d quad
bad xcoll-perf "unexpected argument 'extra'" -b 8 extra
bad xcoll-perf "--minbytes (64) is larger than --maxbytes (8)" -b 64 -e 8
bad xcoll-perf "one rank per process" -g 2
help xcoll-perf

bad xcollrun "unknown option '--bogus'" --bogus true
bad xcollrun "--nproc-per-node wants an integer" --nproc-per-node x true
bad xcollrun "no program to run" --nproc-per-node 2
help xcollrun

bad xcoll-info "unexpected argument '--bogus'" --bogus
bad xcoll-info "--default takes one XCOLL_NAME" --default
help xcoll-info

# xcoll-fr is built only with cJSON.
if [ -x "$tools/xcoll-fr" ]; then
bad xcoll-fr "unknown option '--bogus'" --bogus x
bad xcoll-fr "--last wants a number" --last 0 x
bad xcoll-fr "--last wants a number" --last
bad xcoll-fr "no dump to read" --json
help xcoll-fr
fi

if [ -x "$tools/xcoll-trace-merge" ] && command -v python3 >/dev/null 2>&1; then
  bad xcoll-trace-merge "required: inputs" -o "$tmp/x.json"
  bad xcoll-trace-merge "unrecognized arguments: --bogus" --bogus a.json
  help xcoll-trace-merge
fi

if [ -n "$xtrain" ]; then
  tools=$(dirname "$xtrain")
  bad xtrain "unknown option '--bogus'" --bogus
  bad xtrain "--lr needs a value" --lr
  bad xtrain "--epochs expects an integer" --epochs x
  help xtrain
fi

[ $failures -eq 0 ] && echo "PASS: every tool answers a bad command line in two lines"
[ $failures -eq 0 ]
