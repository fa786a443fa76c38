# common.sh - sourced by the nccl_like test scripts that check a run's INFO
# lines: a scratch directory $tmp (removed at exit) and nl_run_info.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# nl_run_info XCOLLRUN NP PROGRAM [ARGS...]: run PROGRAM on NP ranks under
# xcollrun at XCOLL_DEBUG=INFO, stdout into $tmp/out and stderr into
# $tmp/err; a run that fails (or passes 240 s) fails the test (exit 1, with
# the last lines of both), else the last lines of stdout are shown.
nl_run_info() {
  local xcollrun=$1 np=$2
  shift 2
  if ! XCOLL_DEBUG=INFO timeout -k 5 240 "$xcollrun" --nproc-per-node "$np" \
      --master-port 0 "$@" > "$tmp/out" 2> "$tmp/err"; then
    tail -n 40 "$tmp/err" "$tmp/out"
    echo "FAIL: the run failed"
    exit 1
  fi
  tail -n 5 "$tmp/out"
}
