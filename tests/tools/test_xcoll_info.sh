#!/bin/sh
# test_xcoll_info.sh TOOLS_DIR: xcoll-info and the library agree (both read
# core/params.c's table): a malformed value makes xcoll-info exit 1 naming
# the variable; the defaults it prints are the ones a communicator uses
# (read back from the library's XCOLL_DEBUG=INFO line); XCOLL_DEBUG_FILE's
# %h/%p and XCOLL_DEBUG_SUBSYS work end to end.
set -u
. "$(dirname "$0")/common.sh"
info=$tools/xcoll-info
perf=$tools/xcoll-perf
# common.sh cleared XCOLL_* and the launcher variables; other launchers' too.
unset OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE SLURM_PROCID SLURM_NTASKS

"$info" >"$tmp/clean.out" 2>&1 || fail "xcoll-info exits $? in a clean environment"

# name=value that the library rejects: xcoll-info must exit 1 and name it.
for setting in XCOLL_TIMEOUT_S=0 XCOLL_TIMEOUT_S=abc XCOLL_CHUNK_SIZE=4 \
  XCOLL_CHUNK_SIZE=1Q XCOLL_NSOCKS_PERPEER=17 XCOLL_DEBUG=LOUD \
  XCOLL_DEBUG_SUBSYS=INIT,BOGUS 'XCOLL_SOCKET_IFNAME=eth,,ib' \
  'XCOLL_SOCKET_IFNAME=^' XCOLL_ALGO=nosuch XCOLL_BACKEND=nosuch \
  MASTER_PORT=70000 XCOLL_STORE_MAX_BYTES=1K XCOLL_DEVICE=gpu \
  XCOLL_PROTO=ll128 XCOLL_IB_TIMEOUT=99 XCOLL_IB_DEBUG_FAULT=nope; do
  name=${setting%%=*}
  env "$setting" "$info" >"$tmp/bad.out" 2>&1
  code=$?
  [ $code -eq 1 ] || fail "xcoll-info with $setting exits $code, expected 1"
  grep -q "\^.*$name" "$tmp/bad.out" ||
    fail "xcoll-info with $setting does not name $name under its line"
  # ...and the library refuses the same value (world of one, any backend).
  if env "$setting" "$perf" -b 8 -e 8 -n 1 -w 0 >/dev/null 2>&1; then
    fail "the library accepts $setting that xcoll-info rejects"
  fi
done
# Values the library accepts are accepted.
for setting in XCOLL_TIMEOUT_S=0.5 XCOLL_CHUNK_SIZE=64K 'XCOLL_SOCKET_IFNAME=^=docker0,virbr' \
  XCOLL_DEBUG_SUBSYS=^NET,P2P; do
  env "$setting" "$info" >/dev/null 2>&1 || fail "xcoll-info rejects $setting"
done

# Defaults: what xcoll-info prints is what a communicator uses.
to_bytes() {
  case $1 in
  *G) echo $(( ${1%G} * 1073741824 )) ;;
  *M) echo $(( ${1%M} * 1048576 )) ;;
  *K) echo $(( ${1%K} * 1024 )) ;;
  *) echo "$1" ;;
  esac
}
chunks=$("$info" --default XCOLL_CHUNK_SIZE)
timeout_default=$("$info" --default XCOLL_TIMEOUT_S)
for backend in $(sed -n '/^backends compiled in/,/^$/s/^  \([a-z_]*\) .*/\1/p' "$tmp/clean.out"); do
  shown=$(echo "$chunks" | tr ',' '\n' | sed -n "s/^ *$backend \([0-9]*[KMG]*\)$/\1/p")
  [ -n "$shown" ] || { fail "xcoll-info shows no chunk default for $backend ($chunks)"; continue; }
  XCOLL_BACKEND=$backend XCOLL_DEBUG=INFO "$perf" -b 8 -e 8 -n 1 -w 0 >/dev/null 2>"$tmp/$backend.log" ||
    { fail "xcoll-perf on $backend at one rank failed: $(tail -3 "$tmp/$backend.log")"; continue; }
  used=$(sed -n 's/.* chunk \([0-9]*\) B.*/\1/p' "$tmp/$backend.log" | head -1)
  [ "$used" = "$(to_bytes "$shown")" ] ||
    fail "$backend: xcoll-info says chunk $shown, the library uses ${used:-?} B"
  used_timeout=$(sed -n 's/.* timeout \([0-9.]*\) s,.*/\1/p' "$tmp/$backend.log" | head -1)
  awk -v a="$used_timeout" -v b="$timeout_default" 'BEGIN { exit !(a + 0 == b + 0) }' ||
    fail "$backend: xcoll-info says timeout $timeout_default, the library uses ${used_timeout:-?} s"
done

# XCOLL_DEBUG_FILE: %h is the host name (first label), %p the pid.
XCOLL_DEBUG=INFO XCOLL_DEBUG_FILE="$tmp/log.%h.%p" "$perf" -b 8 -e 8 -n 1 -w 0 >/dev/null 2>&1 ||
  fail "xcoll-perf with XCOLL_DEBUG_FILE failed"
host=$(hostname | cut -d. -f1)
set -- "$tmp"/log."$host".*
[ -f "$1" ] || fail "XCOLL_DEBUG_FILE=$tmp/log.%h.%p made no file log.$host.<pid>: $(ls "$tmp")"
[ -f "$1" ] && { echo "${1##*.}" | grep -Eq '^[0-9]+$' || fail "%p did not become a pid: $1"; }
[ -f "$1" ] && { grep -q 'xcoll INFO' "$1" || fail "the debug file holds no INFO line"; }

# XCOLL_DEBUG_SUBSYS: COLL keeps the per-collective lines and drops INIT's.
XCOLL_DEBUG=INFO XCOLL_DEBUG_SUBSYS=COLL "$perf" -b 8 -e 8 -n 1 -w 0 >/dev/null 2>"$tmp/coll.log"
grep -q 'allreduce seq' "$tmp/coll.log" || fail "XCOLL_DEBUG_SUBSYS=COLL dropped the collective lines"
grep -q 'socket(s) per peer' "$tmp/coll.log" && fail "XCOLL_DEBUG_SUBSYS=COLL kept an INIT line"
XCOLL_DEBUG=INFO XCOLL_DEBUG_SUBSYS=^COLL "$perf" -b 8 -e 8 -n 1 -w 0 >/dev/null 2>"$tmp/nocoll.log"
grep -q 'allreduce seq' "$tmp/nocoll.log" && fail "XCOLL_DEBUG_SUBSYS=^COLL kept a collective line"
grep -q 'socket(s) per peer' "$tmp/nocoll.log" || fail "XCOLL_DEBUG_SUBSYS=^COLL dropped the INIT line"

# A well-formed variable of another backend is ignored with one warning
# that names it and the backend: XCOLL_PROTO on tcp, XCOLL_ALGO on
# nccl_like.
ignored_once() { # ignored_once BACKEND NAME=VALUE
  env XCOLL_BACKEND="$1" "$2" "$perf" -b 8 -e 8 -n 1 -w 0 \
    >/dev/null 2>"$tmp/ignored.log" ||
    { fail "$2 on $1 fails: $(tail -2 "$tmp/ignored.log")"; return; }
  n=$(grep -c "WARN ${2%%=*}=.*does not apply to backend $1" "$tmp/ignored.log")
  [ "$n" -eq 1 ] || fail "$2 on $1: $n warnings, expected 1: $(cat "$tmp/ignored.log")"
}
ignored_once tcp XCOLL_PROTO=ll
if grep -q '^  nccl_like ' "$tmp/clean.out"; then
  ignored_once nccl_like XCOLL_ALGO=rabenseifner
fi

# An NCCL or Gloo variable is never read: one warning names the XCOLL_* one.
env NCCL_SOCKET_IFNAME=lo GLOO_SOCKET_IFNAME=lo "$perf" -b 8 -e 8 -n 1 -w 0 \
  >/dev/null 2>"$tmp/foreign.log" || fail "NCCL_SOCKET_IFNAME set: the run failed"
for name in NCCL_SOCKET_IFNAME GLOO_SOCKET_IFNAME; do
  n=$(grep -c "WARN $name=lo is set.*set XCOLL_SOCKET_IFNAME instead" "$tmp/foreign.log")
  [ "$n" -eq 1 ] || fail "$name set: $n warnings naming XCOLL_SOCKET_IFNAME, expected 1: $(cat "$tmp/foreign.log")"
done

[ $failures -eq 0 ] && echo "PASS: xcoll-info agrees with the library"
[ $failures -eq 0 ]
