#!/bin/sh
# trainer_tables.sh - one command that redoes the comparison tables of
# docs/trainer.md, with the settings those tables were measured with:
#   train     bench/train.sh: xtrain DDP against PyTorch DDP (gloo) on the
#             MLP and on the CNN at 1, 2 and 4 ranks, 5 rounds, a table
#             for each model ("Benchmark")
#   fsdp      bench/fsdp.sh: xtrain's DDP and FSDP shardings on the MLP,
#             4 ranks, 5 rounds ("How FSDP works here")
#   gpt       bench/gpt.sh: every strategy on the gpt and PyTorch DDP beside
#             xtrain's, 4 ranks, 2 rounds ("The gpt report")
#   fsdp_gpt  bench/fsdp_gpt.sh: xtrain's FSDP beside PyTorch's FSDP2 on the
#             gpt, gloo and xcoll, 4 ranks, 60 updates, 2 rounds ("xtrain
#             FSDP beside PyTorch FSDP2")
# The rounds are interleaved across the scripts: round r of every table
# runs before round r+1 of any (a script whose table has fewer rounds sits
# the later ones out), so that load from other jobs on a shared machine
# falls on every table alike; within a round each script interleaves its
# own variants as it does alone. Each table gives medians with the range
# over its rounds, in the Markdown docs/trainer.md shows, under the
# command line that redoes it alone and the load at each of its rounds.
#
# usage: bench/trainer_tables.sh [BUILD_DIR]   (default: build, configured
#        with -DXCOLL_BUILD_TRAINER=ON -DXCOLL_WITH_TORCH=ON)
# env:   TABLES (train fsdp gpt fsdp_gpt) the tables to redo, in this order
#        ROUNDS (each table's own) the rounds of every table
#        RANKS (each table's own) ranks of every table (train: a list)
#        QUICK=1: a smoke test, not a measurement: tiny sizes (an MLP or
#          CNN batch of 8 for 10 updates, a 1-layer gpt of d_model 16 for 4), 1 round,
#          RANKS 2 unless set, hybrid over nodes of 1 rank
#        PYTHON (bench/lib/common.sh; PyTorch >= 2.6 for fsdp_gpt's FSDP2)
# The other scripts' variables (BATCH, STEPS, VARIANTS...) are not passed
# on: the tables are the documented ones. Exit status 77 when a table was
# skipped (its script says why, e.g. no PyTorch or no xcoll_torch), after
# printing the others; 1 when a run failed.
set -eu
bench=trainer_tables.sh
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib/common.sh"
tables=${TABLES:-"train fsdp gpt fsdp_gpt"}
# shellcheck disable=SC2086
tables=$(echo $tables) # one line, single spaces
quick=${QUICK:-0}
all_rounds=${ROUNDS:-}
all_ranks=${RANKS:-}
for t in $tables; do
  case $t in
    train | fsdp | gpt | fsdp_gpt) ;;
    *) bench_fail "unknown table '$t' in TABLES (train, fsdp, gpt, fsdp_gpt)" ;;
  esac
done
case $quick in
  0 | 1) ;;
  *) bench_fail "QUICK must be 0 or 1, not '$quick'" ;;
esac
[ "$quick" = 1 ] && [ -z "$all_ranks" ] && all_ranks=2
# What the scripts read besides the settings given below stays out of them.
unset MODELS N_LAYER N_HEAD D_MODEL CONTEXT BATCH STEPS WARMUP RANKS NODE_RANKS \
  REPEATS REPEAT LR TEST_LIMIT VARIANTS OPTIMIZER BENCH_DIR BENCH_ROUND
bench_setup "${1:-build}"
work=$tmp

# rounds_of TABLE: its rounds (docs/trainer.md's, 1 when quick, or ROUNDS).
rounds_of() {
  if [ -n "$all_rounds" ]; then echo "$all_rounds"
  elif [ "$quick" = 1 ]; then echo 1
  else
    case $1 in train | fsdp) echo 5 ;; gpt | fsdp_gpt) echo 2 ;; esac
  fi
}

# settings TABLE: its script's environment, one NAME=VALUE a line.
settings() {
  case $1 in
    train | gpt) echo "REPEATS=$(rounds_of "$1")" ;;
    fsdp | fsdp_gpt) echo "REPEAT=$(rounds_of "$1")" ;;
  esac
  if [ -n "$all_ranks" ]; then echo "RANKS=$all_ranks"; fi
  if [ "$quick" = 1 ]; then
    case $1 in
      train) printf '%s\n' BATCH=8 STEPS=10 ;;
      fsdp) printf '%s\n' BATCH=8 STEPS=10 ;;
      gpt | fsdp_gpt) printf '%s\n' NODE_RANKS=1 N_LAYER=1 N_HEAD=2 D_MODEL=16 CONTEXT=8 \
        BATCH=2 STEPS=4 WARMUP=2 TEST_LIMIT=2 ;;
    esac
  elif [ "$1" = fsdp_gpt ]; then
    echo STEPS=60
  fi
  return 0
}

# run_script TABLE NAME=VALUE...: TABLE's script with its settings and these.
run_script() {
  t=$1
  shift
  old_ifs=$IFS
  IFS='
'
  set -f
  # shellcheck disable=SC2046
  set -- $(settings "$t") "$@"
  set +f
  IFS=$old_ifs
  env "$@" sh "$(dirname "$0")/$t.sh" "$build" # as this script was named
}

titles() {
  case $1 in
    train) echo "xtrain DDP against PyTorch DDP (gloo), MLP and CNN: bench/train.sh" ;;
    fsdp) echo "xtrain's DDP and FSDP shardings, MLP: bench/fsdp.sh" ;;
    gpt) echo "every strategy on the gpt, and PyTorch DDP: bench/gpt.sh" ;;
    fsdp_gpt) echo "xtrain FSDP beside PyTorch FSDP2, gpt: bench/fsdp_gpt.sh" ;;
  esac
}

most=0
for t in $tables; do
  n=$(rounds_of "$t")
  case $n in "" | *[!0-9]* | 0) bench_fail "ROUNDS must be a count of rounds (1, 2, ...), not '$n'" ;; esac
  if [ "$n" -gt "$most" ]; then most=$n; fi
done
bench_command "TABLES=$tables" "QUICK=$quick" ${ROUNDS:+"ROUNDS=$ROUNDS"} \
  ${all_ranks:+"RANKS=$all_ranks"} "PYTHON=$python"
echo "load (1 min) $(cut -d' ' -f1 /proc/loadavg) at the start; $most interleaved round(s)"
start=$(date +%s)
skipped=
for round in $(seq "$most"); do
  for t in $tables; do
    case " $skipped " in *" $t "*) continue ;; esac
    [ "$round" -le "$(rounds_of "$t")" ] || continue
    echo "$bench: round $round of $most: $t" >&2
    rc=0
    BENCH_DIR=$work/$t BENCH_ROUND=$round run_script "$t" > "$work/$t.out" 2>&1 || rc=$?
    case $rc in
      0) ;;
      77) skipped="$skipped $t"
          tail -n 1 "$work/$t.out" > "$work/$t.skipped" ;;
      *) cat "$work/$t.out"
         bench_fail "$t.sh failed in round $round (exit $rc)" ;;
    esac
  done
done

for t in $tables; do
  echo
  echo "### $(titles "$t")"
  echo
  case " $skipped " in
    *" $t "*) cat "$work/$t.skipped"; continue ;;
  esac
  BENCH_DIR=$work/$t BENCH_ROUND=table run_script "$t"
done
echo
echo "load (1 min) $(cut -d' ' -f1 /proc/loadavg) at the end; $(( $(date +%s) - start )) s in all"
[ -z "$skipped" ] || exit 77
