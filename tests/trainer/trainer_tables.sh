#!/bin/sh
# trainer_tables.sh SCRIPT BUILD_DIR PYTHON
# Smoke test of bench/trainer_tables.sh (every comparison table of
# docs/trainer.md from one command) in quick mode at 2 ranks: each of the
# four sections is there under its command line and its load line, with
# every row once, as many cells as its header, and every cell after the
# row's name a number (a median, with a range or parts in brackets); so is
# the row of bench/gpt.sh's xtrain/PyTorch table, and the 2-rank row of the
# MLP's and of the CNN's table of bench/train.sh, each under its lead line.
# The figures are not judged: quick mode measures nothing. Exit 77 (skipped) when the script says a
# table cannot run here (no PyTorch, no xcoll_torch).
set -u
script=$1 build=$2 python=$3
out=$(QUICK=1 RANKS=2 PYTHON=$python sh "$script" "$build" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 77 ] && { echo "skipped: a table cannot run here (the line under its heading says why)"; exit 77; }
[ $rc -eq 0 ] || { echo "FAIL: bench/trainer_tables.sh exited $rc"; exit 1; }

fail() {
  echo "FAIL: $*"
  exit 1
}

# check NAME[:MODEL] LABEL...: the section of bench/NAME.sh has a command
# line, a load line, and one row for each LABEL (the empty label: the row of
# the table headed "xtrain ddp samples/s") with every figure a number; with
# :MODEL, in the part of the section from its line "model MODEL, ..." to
# the next "model " line.
check() {
  name=${1%%:*} model=${1#*:}
  [ "$model" = "$1" ] && model=
  shift
  sec=$(echo "$out" | awk -v s="bench/$name.sh" '/^### / { on = index($0, s) > 0; next } on')
  [ -n "$sec" ] || fail "no section for bench/$name.sh"
  echo "$sec" | grep -q '^command: .*'"$name"'\.sh ' || fail "$name: no command line"
  echo "$sec" | grep -q '^load (1 min) at the start of each' || fail "$name: no load line"
  if [ -n "$model" ]; then
    sec=$(echo "$sec" | awk -v m="model $model, " '/^model / { on = index($0, m) == 1 } on')
    [ -n "$sec" ] || fail "$name: no lead line \"model $model, ...\""
    name="$name $model"
  fi
  for label in "$@"; do
    echo "$sec" | awk -F'|' -v label="$label" -v name="$name" '
      function trim(s) { gsub(/^ +| +$/, "", s); return s }
      BEGIN { row = label == "" ? "xtrain/PyTorch" : label }
      !/^\|/ { header = 0; next }
      header == 0 { header = NF; head = trim($2); next }   # a table starts
      /^\|---/ { next }
      label == "" ? head == "xtrain ddp samples/s" : trim($2) == label {
        found++
        if (NF != header) { print "FAIL: " name ": " row ": " NF - 2 " cells, the header has " header - 2; bad = 1 }
        for (i = (label == "" ? 2 : 3); i < NF; i++) {
          cell = $i
          gsub(/ /, "", cell)
          if (cell == "n/a" && label ~ /^dp /) continue   # no communication to hide
          if (cell !~ /^[0-9]/ || cell ~ /[^0-9,.()+x%-]/) {
            print "FAIL: " name ": " row ": cell " i - 1 " is not a number: " $i; bad = 1
          }
        }
      }
      END {
        if (found != 1) { print "FAIL: " name ": row \"" row "\" found " found + 0 " times, not once"; bad = 1 }
        exit bad
      }' || exit 1
  done
}

check train:mlp 2
check train:cnn 2
check fsdp ddp "fsdp --sharding full_shard" "fsdp --sharding shard_grad_op" \
  "fsdp --sharding full_shard --backward-prefetch none" \
  "fsdp --sharding full_shard --forward-prefetch on"
check gpt ddp "fsdp full_shard" "fsdp shard_grad_op" "fsdp hybrid_shard (2 simulated nodes)" \
  "ddp --reduce-dtype bfloat16" "fsdp full_shard, param+reduce bfloat16" \
  "dp (1 process, threads)" ""
check fsdp_gpt xtrain.full_shard fsdp2.full_shard.gloo fsdp2.full_shard.xcoll \
  xtrain.shard_grad_op fsdp2.shard_grad_op.gloo fsdp2.shard_grad_op.xcoll \
  xtrain.hybrid_shard fsdp2.hybrid_shard.gloo fsdp2.hybrid_shard.xcoll
echo "every table has every row, each figure a number"
