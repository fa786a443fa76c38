# bench/lib/common.sh - what the trainer benchmarks share, sourced by
# bench/train.sh, fsdp.sh, gpt.sh, fsdp_gpt.sh and trainer_tables.sh: the
# build and Python checks, one BLAS/OpenMP thread per rank, the folder the
# runs write to, which of the rounds one invocation runs, the load at each
# round, the command line that redoes a table, and for the gpt scripts the
# model's settings and the simulated-nodes wrapper (bench_nodes_wrapper,
# which tests/trainer/fsdp_equivalence.sh and fsdp_checkpoint.sh source this
# file for). POSIX sh; nothing here runs a benchmark.
#
# A script sets `bench` (its name, for messages) and `here` (the bench/
# folder), sources this file and calls bench_setup BUILD_DIR first.
#
# Environment read here:
#   PYTHON       the Python the PyTorch rows run under (default: the
#                checkout's .venv/bin/python when there is one, else python3)
#   BENCH_DIR    keep the runs' logs in this folder (made when missing)
#                rather than in a temporary one removed at exit
#   BENCH_ROUND  N: run round N only, into BENCH_DIR, and print no table;
#                table: run nothing and print the table of the rounds
#                already in BENCH_DIR. Unset: every round, then the table.
#                bench/trainer_tables.sh interleaves the scripts' rounds so.

bench_fail() { # bench_fail MESSAGE: say what is wrong and stop
  echo "$bench: $*" >&2
  exit 1
}

# bench_setup BUILD_DIR: sets build, xtrain, xcollrun, python, cores, tmp
# (the runs' folder) and round_only (the round to run, none, or every one).
bench_setup() {
  build=$1
  xtrain=$build/trainer/xtrain
  xcollrun=$build/tools/xcollrun
  for f in "$xtrain" "$xcollrun"; do
    [ -x "$f" ] || bench_fail "$f not found: build first (cmake --build $build," \
      "configured with -DXCOLL_BUILD_TRAINER=ON)"
  done
  python=${PYTHON:-}
  if [ -z "$python" ]; then
    python=python3
    [ -x "$here/../.venv/bin/python" ] && python=$(cd "$here/.." && pwd)/.venv/bin/python
  fi
  cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) # GNU nproc obeys both
  export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
  case ${BENCH_ROUND:-} in
    "") round_only=every ;;
    table) round_only=none ;;
    *[!0-9]* | 0) bench_fail "BENCH_ROUND must be a round number (1, 2, ...) or 'table'," \
      "not '$BENCH_ROUND'" ;;
    *) round_only=$BENCH_ROUND ;;
  esac
  if [ -n "${BENCH_DIR:-}" ]; then
    tmp=$BENCH_DIR
    mkdir -p "$tmp" || bench_fail "cannot make BENCH_DIR $tmp"
  elif [ "$round_only" != every ]; then
    bench_fail "BENCH_ROUND=$BENCH_ROUND needs BENCH_DIR, the folder its rounds share"
  else
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
  fi
}

# bench_need_python CODE WHAT: exit 77 (skipped), saying WHAT is missing,
# when $python cannot run the Python statements CODE (asked only when this
# invocation runs rounds).
bench_need_python() {
  [ "$round_only" = none ] && return 0 # the table alone runs no Python with torch
  why=$("$python" -c "$1" 2>&1) ||
    { echo "$bench: skipped: $python cannot $2: $(echo "$why" | tail -n 1)"; exit 77; }
}

# bench_rounds COUNT: sets rounds, the rounds of COUNT this invocation runs.
bench_rounds() {
  case $round_only in
    every) rounds=$(seq "$1") ;;
    none) rounds= ;;
    *) [ "$round_only" -le "$1" ] ||
         bench_fail "BENCH_ROUND $round_only is past the $1 round(s) asked for"
       rounds=$round_only ;;
  esac
}

# bench_table_wanted: true unless this invocation runs one round only.
bench_table_wanted() {
  [ "$round_only" = every ] || [ "$round_only" = none ]
}

# bench_round_begin N and bench_round_end N COUNT around round N: the load
# average (1 minute) at its start and its seconds, kept in $tmp for
# bench_loads; the end says so on stderr.
bench_round_begin() {
  cut -d' ' -f1 /proc/loadavg > "$tmp/load.$1"
  date +%s > "$tmp/began.$1"
}
bench_round_end() {
  echo $(( $(date +%s) - $(cat "$tmp/began.$1") )) > "$tmp/seconds.$1"
  cut -d' ' -f1 /proc/loadavg > "$tmp/load_end.$1"
  echo "$bench: round $1 of $2 done in $(cat "$tmp/seconds.$1") s," \
    "load $(cat "$tmp/load_end.$1")" >&2
}

# bench_loads COUNT: one line on the load average at the start of each of
# the COUNT rounds, at the end of the last, and the seconds they took.
bench_loads() {
  starts= seconds=0
  for r in $(seq "$1"); do
    [ -f "$tmp/load.$r" ] || bench_fail "round $r of $1 has not run (no $tmp/load.$r)"
    starts="$starts${starts:+, }$(cat "$tmp/load.$r")"
    seconds=$((seconds + $(cat "$tmp/seconds.$r")))
  done
  echo "load (1 min) at the start of each of the $1 round(s): $starts;" \
    "$(cat "$tmp/load_end.$1") at the end; $seconds s of runs in all"
}

# bench_command NAME=VALUE...: the line "command: NAME=VALUE ... sh SCRIPT
# BUILD" that redoes this table alone, values with spaces quoted.
bench_command() {
  line="command:"
  for setting in "$@"; do
    case ${setting#*=} in
      *" "*) setting="${setting%%=*}='${setting#*=}'" ;;
    esac
    line="$line $setting"
  done
  echo "$line sh $0 $build"
}

# bench_gpt_settings: the gpt's sizes and timing from the environment
# (bench/gpt.sh and fsdp_gpt.sh; their headers list the variables), checked,
# with timed (the updates counted) and $tmp/nodes.sh, the wrapper that runs
# a rank as one of RANKS/NODE_RANKS simulated nodes (bench_nodes_wrapper).
bench_gpt_settings() {
  n_layer=${N_LAYER:-4}
  n_head=${N_HEAD:-4}
  d_model=${D_MODEL:-128}
  context=${CONTEXT:-64}
  batch=${BATCH:-16}
  steps=${STEPS:-100}
  warmup=${WARMUP:-10}
  ranks=${RANKS:-4}
  node_ranks=${NODE_RANKS:-2}
  lr=${LR:-0.001}
  test_limit=${TEST_LIMIT:-64}
  if [ "$warmup" -lt 1 ] || [ "$steps" -lt $((2 * warmup)) ]; then
    bench_fail "need WARMUP >= 1 and STEPS >= 2 x WARMUP (got $steps, $warmup)"
  fi
  [ "$node_ranks" -ge 1 ] && [ $((ranks % node_ranks)) -eq 0 ] ||
    bench_fail "RANKS ($ranks) must be a multiple of NODE_RANKS ($node_ranks)"
  [ $((d_model % n_head)) -eq 0 ] ||
    bench_fail "D_MODEL ($d_model) must be divisible by N_HEAD ($n_head)"
  # Updates counted: the records after the first, WARMUP updates each.
  timed=$(( (steps / warmup - 1) * warmup ))
  bench_nodes_wrapper "$tmp/nodes.sh"
}

# bench_nodes_wrapper FILE: writes FILE, a wrapper that `sh FILE LWS
# COMMAND...` runs COMMAND through as a rank of one of WORLD_SIZE/LWS
# simulated nodes of LWS ranks each (LOCAL_WORLD_SIZE, LOCAL_RANK,
# GROUP_RANK, GROUP_WORLD_SIZE set as xcollrun --nnodes would), under one
# xcollrun.
bench_nodes_wrapper() {
  cat > "$1" <<'WRAP'
lws=$1
shift
export LOCAL_WORLD_SIZE=$lws LOCAL_RANK=$((RANK % lws))
export GROUP_RANK=$((RANK / lws)) GROUP_WORLD_SIZE=$((WORLD_SIZE / lws))
exec "$@"
WRAP
}
