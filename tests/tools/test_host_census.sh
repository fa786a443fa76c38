#!/bin/sh
# test_host_census.sh TOOLS_DIR: the host census (core/host.h) counts the
# CPUs of a host as the union of its ranks' affinity masks. Two ranks
# pinned to two CPUs (as mpirun binds 2 ranks, or srun --cpu-bind=cores)
# are one CPU each, not an oversubscribed host; two ranks pinned to one
# CPU are. Each rank's INFO line and xcoll-perf's header (xcoll_comm_host)
# say so, and the choices that follow from it differ: tcp's allreduce of
# 4 MiB at P=2 is the ring with a CPU each and Rabenseifner oversubscribed
# (core/algorithm_select.c); nccl_like's is its ring kernel, or
# oversubscribed Rabenseifner's over the pairwise links (XCOLL_PAIRWISE
# auto, backends/nccl_like/rabenseifner.c). Skipped (77) with fewer than 2
# CPUs or without taskset.
set -u
. "$(dirname "$0")/common.sh"
command -v taskset >/dev/null 2>&1 || { echo "SKIP: no taskset"; exit 77; }
# The first two CPUs this process may run on ("0-3,8" -> 0 1).
cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status |
  tr ',' '\n' | awk -F- '{ hi = NF > 1 ? $2 : $1; for (c = $1; c <= hi; c++) print c }' |
  head -2 | tr '\n' ' ')
set -- $cpus
[ $# -ge 2 ] || { echo "SKIP: needs 2 CPUs, this process may run on $cpus"; exit 77; }
first=$1 second=$2
# A wrapper that pins rank r to the r-th CPU of its list.
cat >"$tmp/pin" <<EOS
#!/bin/sh
list="\$PIN_CPUS"
set -- "\$@"
cpu=\$(echo "\$list" | cut -d, -f\$((LOCAL_RANK + 1)))
exec taskset -c "\$cpu" "\$@"
EOS
chmod +x "$tmp/pin"
export XCOLL_TIMEOUT_S=30 XCOLL_DEBUG=INFO
run() { # PIN_CPUS BACKEND -> $tmp/out
  PIN_CPUS=$1 XCOLL_BACKEND=$2 "$tools/xcollrun" --nproc-per-node 2 \
    --master-port 0 "$tmp/pin" "$tools/xcoll-perf" -b 4M -e 4M -n 2 -w 1 \
    >"$tmp/out" 2>&1 || { fail "$2 on CPUs $1: exit $?"; tail -20 "$tmp/out"; }
}
expect() { # REGEX WHAT
  grep -Eq "$1" "$tmp/out" || { fail "$2: no line matching '$1'"; grep -E 'on this host|algorithm|[0-9]+ +[0-9]+ +float' "$tmp/out" | head -8; }
}
refuse() { # REGEX WHAT
  ! grep -Eq "$1" "$tmp/out" || { fail "$2: a line matches '$1'"; grep -E "$1" "$tmp/out" | head -4; }
}
row='^\[rank 0\] +4194304 '
for backend in tcp nccl_like; do
  run "$first,$second" $backend
  for r in 0 1; do
    expect "\\[rank $r\\].* 2 rank\\(s\\) of this communicator on this host, on 2 CPU\\(s\\) between them \\(this rank may run on 1\\)$" \
      "$backend, pinned to CPUs $first and $second, rank $r"
  done
  refuse 'oversubscribed' "$backend, pinned to CPUs $first and $second"
  expect "^\\[rank 0\\] # host of rank 0: 2 rank\\(s\\) of 2 on 2 CPU\\(s\\) between them, rank 0 may run on 1 \\(xcoll_comm_host\\)$" \
    "$backend, pinned to CPUs $first and $second: xcoll-perf's header"
  [ $backend = tcp ] && expect "$row.* ring/p2p$" "tcp, a CPU each: the ring"
  [ $backend = nccl_like ] && expect "$row.* ring/simple$" "nccl_like, a CPU each: the ring"

  run "$first,$first" $backend
  for r in 0 1; do
    expect "\\[rank $r\\].* 2 rank\\(s\\) of this communicator on this host, on 1 CPU\\(s\\) between them \\(this rank may run on 1\\); oversubscribed$" \
      "$backend, both pinned to CPU $first, rank $r"
  done
  expect "^\\[rank 0\\] # host of rank 0: 2 rank\\(s\\) of 2 on 1 CPU\\(s\\) between them, rank 0 may run on 1; oversubscribed" \
    "$backend, both pinned to CPU $first: xcoll-perf's header"
  [ $backend = tcp ] && expect "$row.* rabenseifner/p2p$" "tcp, one CPU: Rabenseifner"
  [ $backend = nccl_like ] && expect "$row.* rabenseifner/direct$" "nccl_like, one CPU: Rabenseifner over the pairwise links"
done
[ $failures -eq 0 ] && echo "PASS: the host census counts the union of the ranks' CPUs"
[ $failures -eq 0 ]
