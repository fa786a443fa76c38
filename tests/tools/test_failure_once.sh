#!/bin/sh
# test_failure_once.sh TOOLS_DIR [XTRAIN]: a failed init is reported once per
# rank: the library's WARN line names what was wrong and the tool does not
# print it again; with XCOLL_DEBUG=NONE (no WARN line) the tool prints it,
# once. Each case runs one rank without the launcher and counts the lines.
set -u
. "$(dirname "$0")/common.sh"
xtrain=${2:-}
export XCOLL_TIMEOUT_S=3

# once WHAT PATTERN command...: exit 1, exactly one line on stderr, naming
# PATTERN.
once() {
  what=$1 pattern=$2
  shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  code=$?
  [ $code -eq 1 ] || fail "$what: exit $code, want 1: $(head -3 "$tmp/err")"
  lines=$(wc -l <"$tmp/err")
  [ "$lines" -eq 1 ] || { fail "$what: $lines lines on stderr, want 1:"; cat "$tmp/err"; }
  grep -q -- "$pattern" "$tmp/err" || fail "$what: the line does not say '$pattern': $(cat "$tmp/err")"
}

perf="$tools/xcoll-perf -b 8 -e 8 -n 1 -w 0"
# shellcheck disable=SC2086
once "bad XCOLL_PROTO" "XCOLL_PROTO='bogus'" env XCOLL_PROTO=bogus $perf
# shellcheck disable=SC2086
once "unknown XCOLL_BACKEND" "unknown backend 'nosuch'" env XCOLL_BACKEND=nosuch $perf
# shellcheck disable=SC2086
once "unknown XCOLL_BACKEND, XCOLL_DEBUG=NONE" "unknown backend 'nosuch'" \
  env XCOLL_DEBUG=NONE XCOLL_BACKEND=nosuch $perf
# Rank 1 of 2 whose store does not answer (nothing listens on port 1).
# shellcheck disable=SC2086
once "unreachable store" "could not reach the rendezvous store at 127.0.0.1:1" \
  env RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 $perf

if [ -n "$xtrain" ]; then
  once "xtrain, bad XCOLL_PROTO" "XCOLL_PROTO='bogus'" \
    env XCOLL_PROTO=bogus \
    "$xtrain" --strategy ddp --max-steps 1
fi

[ $failures -eq 0 ] && echo "PASS: each failure is printed once per rank"
[ $failures -eq 0 ]
