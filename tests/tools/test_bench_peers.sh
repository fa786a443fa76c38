#!/bin/sh
# test_bench_peers.sh TOOLS_DIR [PYTHON] - bench/allreduce.py's peers run
# every collective it offers (--coll) and check their results: the gloo
# peer (bench/torch_allreduce.py) where PYTHON has torch, Open MPI's
# (bench/mpi_allreduce.c) where mpicc and mpirun are installed (bash
# scripts/setup.sh --peers). For each collective, at 2 and 3 ranks (3:
# block sizes rounded to a multiple of 12 bytes), the script must exit 0
# (no peer failed or computed a wrong result) and every row of every table
# must hold a time for xcoll and for each peer (a size that one side ran
# under another name would show as "-"); alltoall once more with
# --nonblocking. Exit 77 with neither peer.
. "$(dirname "$0")/common.sh"
python=${2:-python3}
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$tools/.." && pwd)
peers=""
if command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1; then
  peers="ompi-sm"
fi
if "$python" -c "import torch.distributed as d; assert d.is_gloo_available()" \
    >/dev/null 2>&1; then
  peers="$peers gloo"
fi
peers=${peers# }
if [ -z "$peers" ]; then
  echo "skipped: no peer to run: neither mpicc and mpirun (bash scripts/setup.sh --peers) nor torch in $python"
  exit 77
fi
echo "peers: $peers"
# The last pass: each call's non-blocking form, waited for at once
# (--nonblocking: xcoll-perf -z 2, MPI_I* + MPI_Wait, async_op=True).
for coll in allreduce broadcast reduce allgather reduce_scatter alltoall \
    alltoall:nonblocking; do
  mode=""
  case $coll in *:nonblocking) coll=${coll%:*} mode=--nonblocking ;; esac
  out=$tmp/$coll$mode.md
  # shellcheck disable=SC2086
  if ! timeout -k 5 280 "$python" "$root/bench/allreduce.py" --coll "$coll" \
      --sizes 64,4K --iters 3 --warmup 1 --backends tcp --peers "$peers" \
      --compare "${peers%% *}" --nproc "2 3" --build "$build" --timeout 60 \
      $mode >"$out" 2>"$tmp/$coll.err"; then
    fail "$coll: bench/allreduce.py failed: $(grep -E 'failed|WRONG|missing' "$out" | head -3)"
    continue
  fi
  if [ -n "$mode" ] && ! grep -q 'waited for at once' "$out"; then
    fail "$coll $mode: the table does not say the calls were non-blocking"
  fi
  rows=$(grep -c '^| [0-9]' "$out")
  [ "$rows" -eq 4 ] || fail "$coll: $rows rows of figures, 4 wanted (2 sizes, 2 world sizes)"
  if grep '^| [0-9]' "$out" | grep -q '| - |'; then
    fail "$coll: a row misses a figure: $(grep '^| [0-9]' "$out" | grep '| - |' | head -1)"
  fi
done
[ "$failures" -eq 0 ] && echo "PASS: every collective on xcoll-tcp and $peers"
exit $((failures > 0))
