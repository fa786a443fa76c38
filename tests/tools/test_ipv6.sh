#!/bin/sh
# test_ipv6.sh TOOLS_DIR: the tcp backend over IPv6 with XCOLL_SOCKET_IFNAME
# and XCOLL_SOCKET_FAMILY: two ranks on ::1 run a checked allreduce, and the
# address they publish is an IPv6 one. Skipped (77) without IPv6 loopback.
set -u
tools=$1
grep -q '^00000000000000000000000000000001 ' /proc/net/if_inet6 2>/dev/null ||
  { echo "SKIP: no IPv6 loopback (::1)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for v in $(env | sed -n 's/^\(XCOLL_[A-Z0-9_]*\)=.*/\1/p'); do unset "$v"; done
export XCOLL_TIMEOUT_S=30 XCOLL_BACKEND=tcp XCOLL_DEBUG=INFO XCOLL_DEBUG_SUBSYS=NET
status=0
# The route to an IPv6 master, then an interface list with IPv6 forced.
for how in "" "XCOLL_SOCKET_IFNAME=^docker XCOLL_SOCKET_FAMILY=AF_INET6"; do
  # shellcheck disable=SC2086
  env $how "$tools/xcollrun" --nproc-per-node 2 --master-addr ::1 --master-port 0 \
    "$tools/xcoll-perf" -b 8 -e 64K -f 32 -n 2 -w 1 >"$tmp/out" 2>&1
  code=$?
  if [ $code -ne 0 ] || ! grep -q 'Out of bounds values : 0 OK' "$tmp/out"; then
    echo "FAIL ($how): exit $code"; tail -20 "$tmp/out"; status=1
  elif ! grep -q 'published as \[[0-9a-f:]*\]:[0-9]*' "$tmp/out"; then
    echo "FAIL ($how): no IPv6 address published"; grep listens "$tmp/out"; status=1
  fi
done
[ $status -eq 0 ] && echo "PASS: tcp backend over IPv6"
exit $status
