#!/usr/bin/env bash
# netns.sh - xcoll across 4 "hosts": 4 network namespaces joined by a bridge
# (in a fifth, hub namespace), each rank in its own namespace with its own
# address, so that every byte crosses a real (virtual) network link.
#   netns.sh PROG BACKEND cut     rank 2's host is cut off (its link goes
#                                 down) mid-run: every survivor must fail
#                                 within XCOLL_TIMEOUT_S (5 s) + 5 s.
#   netns.sh PROG BACKEND loss P  P% of the packets every host receives are
#                                 dropped (iptables statistic, or tc netem):
#                                 200 allreduces (100 at 5% or more) must be
#                                 exact on every rank.
#   netns.sh PROG BACKEND synack  startup after a lost SYN-ACK, which makes
#                                 the kernel's first RTT sample of a
#                                 connection about 1 s and its first RTO
#                                 about 2.3 s, doubling: ranks 1-3 lose
#                                 the first SYN-ACK of their store
#                                 connection and their first 3
#                                 authentication offers to it; rank 0 the
#                                 first SYN-ACK of its mesh connection to
#                                 rank 1, and rank 1 rank 0's first HELLO
#                                 (tcp). With XCOLL_TIMEOUT_S=10 every rank
#                                 must start and run 5 exact allreduces:
#                                 the store's lost packets alone cost
#                                 12.5 s on one connection, and the late
#                                 HELLO outlasts the listener's 2 s
#                                 XCOLL_STRANGER_DEADLINE_S.
# PROG is tests/netns/netns_loop.c's binary. Needs root and CAP_NET_ADMIN to
# create namespaces (and iptables or sch_netem for loss); otherwise exits 77 (skipped)
# with the reason.
set -u
prog=$1 backend=$2 mode=$3 loss=${4:-0}
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root to create network namespaces"
command -v ip >/dev/null || skip "ip (iproute2) is not installed"
id=$$
hub=xch$id
ns() { echo "xcr${id}_$1"; }
cleanup() {
  for pid in ${pids:-}; do kill -KILL "$pid" 2>/dev/null; done
  for r in 0 1 2 3; do ip netns del "$(ns $r)" 2>/dev/null; done
  ip netns del "$hub" 2>/dev/null
  rm -rf "${tmp:-/nonexistent}"
}
trap cleanup EXIT
ip netns add "$hub" 2>/dev/null ||
  skip "cannot create a network namespace (ip netns add): no CAP_SYS_ADMIN?"
ip -n "$hub" link add br0 type bridge && ip -n "$hub" link set br0 up ||
  skip "cannot create a bridge in a namespace"
for r in 0 1 2 3; do
  n=$(ns $r)
  ip netns add "$n" || skip "cannot create namespace $n"
  ip link add "xa${r}_$id" type veth peer name "xb${r}_$id" ||
    skip "cannot create a veth pair"
  ip link set "xa${r}_$id" netns "$hub"
  ip link set "xb${r}_$id" netns "$n"
  ip -n "$hub" link set "xa${r}_$id" master br0 up
  ip -n "$n" link set lo up
  ip -n "$n" addr add "10.77.0.$((r + 1))/24" dev "xb${r}_$id"
  ip -n "$n" link set "xb${r}_$id" up
done
if [ "$mode" = loss ]; then
  # Drop P% of the packets each host receives, at random (iptables'
  # statistic match; tc netem where iptables is missing).
  p=$(awk -v l="$loss" 'BEGIN { printf "%.4f", l / 100 }')
  for r in 0 1 2 3; do
    if command -v iptables >/dev/null &&
       ip netns exec "$(ns $r)" iptables -A INPUT -m statistic --mode random \
         --probability "$p" -j DROP 2>/dev/null; then
      continue
    fi
    ip netns exec "$hub" tc qdisc add dev "xa${r}_$id" root netem \
      loss "${loss}%" 2>/dev/null ||
      skip "neither iptables' statistic match nor tc netem works here"
  done
fi

if [ "$mode" = synack ]; then
  command -v iptables >/dev/null || skip "iptables is not installed"
  # Exact packets by size, no randomness: a SYN-ACK is 60 bytes, an
  # rank's first message to the store 121 (IP + TCP with timestamps + the
  # 37-byte offer and its 32-byte hello tag, core/auth.h),
  # a tcp mesh HELLO 185. Rules on the hosts' links only: rank 0 reaches
  # its own store over lo.
  ipt() { # ipt RANK MATCH...: drop what matches on RANK's link
    r=$1
    shift
    ip netns exec "$(ns "$r")" iptables -A INPUT -i "xb${r}_$id" -p tcp "$@" \
      -j DROP
  }
  for r in 1 2 3; do
    ipt $r --sport 29511 --tcp-flags SYN,ACK SYN,ACK -m quota --quota 60 ||
      skip "iptables' quota match is missing"
    ipt 0 -s "10.77.0.$((r + 1))" --dport 29511 -m length --length 121 \
      -m quota --quota $((3 * 121))
  done
  if [ "$backend" = tcp ]; then
    ipt 0 -s 10.77.0.2 ! --sport 29511 --tcp-flags SYN,ACK SYN,ACK \
      -m quota --quota 60
    ipt 1 -s 10.77.0.1 -m length --length 185 -m quota --quota 185
  fi
fi

tmp=$(mktemp -d)
export NETNS_READY_DIR=$tmp
export XCOLL_BACKEND=$backend XCOLL_TIMEOUT_S=5
if [ "$backend" = ucx ]; then
  # Across hosts: tcp between the namespaces (shared memory would bypass the
  # network, as /dev/shm is common to them) with UCX peer failure handling.
  export UCX_TLS=tcp,self XCOLL_UCX_ERR_MODE=peer
  export UCX_NET_DEVICES=all
fi
if [ "$mode" = loss ]; then
  # 5% loss: half the allreduces, which still lose hundreds of packets
  # (checked below); each costs retransmission timeouts.
  iterations=200
  [ "$loss" -ge 5 ] && iterations=100
  args=(--iterations "$iterations")
  export XCOLL_TIMEOUT_S=60
elif [ "$mode" = synack ]; then
  args=(--iterations 5)
  export XCOLL_TIMEOUT_S=10
  started=$(date +%s.%N)
else
  args=(--until-failure 10)
fi
pids=""
for r in 0 1 2 3; do
  ip netns exec "$(ns $r)" env RANK=$r WORLD_SIZE=4 LOCAL_RANK=0 \
    LOCAL_WORLD_SIZE=1 MASTER_ADDR=10.77.0.1 MASTER_PORT=29511 \
    "$prog" "${args[@]}" >"$tmp/out.$r" 2>&1 &
  pids="$pids $!"
done

fail=0
if [ "$mode" = cut ]; then
  # Cut rank 2's host off once every rank is mid-run (bounded wait).
  deadline=$((SECONDS + 60))
  while [ "$(ls "$tmp" | grep -c '^[0-3]$')" -lt 4 ]; do
    if [ $SECONDS -ge $deadline ]; then
      echo "FAIL: the ranks did not all start within 60 s"
      cat "$tmp"/out.*
      exit 1
    fi
    sleep 0.1
  done
  ip -n "$hub" link set "xa2_$id" down
  echo "cut rank 2's link at $(date +%T.%N)"
fi
# Every rank ends by itself (the survivors within their bound); cap it.
deadline=$((SECONDS + 120))
for pid in $pids; do
  while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do
    sleep 0.2
  done
done
for r in 0 1 2 3; do sed "s/^/[rank $r] /" "$tmp/out.$r"; done
if [ "$mode" = cut ]; then
  for r in 0 1 3; do
    grep -q "^CUT-OK rank $r:" "$tmp/out.$r" ||
      { echo "FAIL: survivor rank $r did not fail within its bound"; fail=1; }
  done
elif [ "$mode" = synack ]; then
  echo "the job took $(awk -v a="$started" -v b="$(date +%s.%N)" \
    'BEGIN { printf "%.2f", b - a }') s"
  for r in 0 1 2 3; do
    grep -q "^EXACT rank $r:" "$tmp/out.$r" ||
      { echo "FAIL: rank $r did not start and finish exact"; fail=1; }
  done
  # Every rule must have dropped what it was written for, or the test
  # proves nothing (a packet size changed?).
  for r in 0 1 2 3; do
    ip netns exec "$(ns $r)" iptables -L INPUT -v -x -n | awk -v r="$r" '
      NR > 2 { printf "rank %d host dropped %d packet(s): %s\n", r, $1,
               substr($0, index($0, $10)); if ($1 == 0) bad = 1 }
      END { exit bad }' || { echo "FAIL: a rule of rank $r's host dropped nothing"; fail=1; }
  done
else
  for r in 0 1 2 3; do
    grep -q "^EXACT rank $r:" "$tmp/out.$r" ||
      { echo "FAIL: rank $r did not finish exact under ${loss}% loss"; fail=1; }
  done
  # The loss must have happened: count what iptables dropped (netem keeps
  # its own counters; tc -s shows them).
  dropped=0
  for r in 0 1 2 3; do
    d=$(ip netns exec "$(ns $r)" iptables -L INPUT -v -x -n 2>/dev/null |
      awk '/statistic/ { s += $1 } END { print s + 0 }')
    dropped=$((dropped + d))
  done
  netem=$(ip netns exec "$hub" tc -s qdisc show 2>/dev/null |
    awk '/netem/ { n = 1 } /dropped/ && n { gsub(",", ""); for (i = 1; i <= NF; i++) if ($i == "dropped") s += $(i + 1) } END { print s + 0 }')
  echo "packets dropped: $dropped by iptables, $netem by netem"
  [ $((dropped + netem)) -gt 0 ] ||
    { echo "FAIL: no packet was dropped: the loss was not applied"; fail=1; }
fi
[ $fail -eq 0 ] && echo "PASS: netns $mode on $backend"
exit $fail
