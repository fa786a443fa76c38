#!/bin/sh
# checkpoint_kill.sh XTRAIN XCOLLRUN COMPARE
# Sharded FSDP saves killed at every point (trainer/checkpoint_fsdp.c's
# two-phase save, trainer/fault_point.h), 2 ranks, a tiny MLP run:
#  - a run saves step 4 (generation 1); a resumed run that saves step 8 is
#    killed (SIGKILL, by XTRAIN_FAULT_POINT) at each fault point it passes,
#    on rank 0 and on rank 1 in turn (18 points), during the save of
#    checkpoint_best and of checkpoint_latest; then --resume must load on
#    both ranks, and its parameters must be bitwise those of the last save
#    that completed: step 4 until rank 0 has renamed the new index, step 8
#    from then on;
#  - the next save after a kill leaves only its own generation, and the run
#    ends bitwise where a straight run does;
#  - a set whose rank 1 file is missing is refused by every rank, and rank
#    0 never says "resumed";
#  - a set written before generations (no "generation" in the index,
#    <stem>.rank<r>-of-<W>.safetensors) still resumes, and the next save
#    removes its files.
set -eu
xtrain=$1 xcollrun=$2 compare=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common="--model mlp --strategy fsdp --batch-size 8 --epochs 2 \
  --train-limit 64 --test-limit 32 --seed 3 --checkpoint-format sharded"
# 64 samples / (2 ranks x 8) = 4 updates per epoch: a save at step 4, one
# at step 8.
run() { # run LOG ARGS...: 2 ranks of xtrain; 0 when the job succeeded
  log=$1
  shift
  timeout 60 "$xcollrun" --nproc-per-node 2 --master-port 0 "$@" \
    > "$log" 2>&1
}
must() { # must LOG ARGS...: run, shown on failure
  run "$@" || { cat "$1"; echo "FAIL: the run above failed"; exit 1; }
}
# XTRAIN_FAULT_POINT for one rank of the job.
cat > "$tmp/on_rank.sh" <<'WRAP'
target=$1 setting=$2
shift 2
[ "$RANK" = "$target" ] && export XTRAIN_FAULT_POINT="$setting"
exec "$@"
WRAP

must "$tmp/ref4.log" "$xtrain" $common --max-steps 4 --dump-params "$tmp/ref4"
must "$tmp/ref8.log" "$xtrain" $common --max-steps 8 --dump-params "$tmp/ref8"
must "$tmp/base.log" "$xtrain" $common --max-steps 4 --checkpoint-dir "$tmp/base"
test -s "$tmp/base/checkpoint_latest.g1.rank1-of-2.safetensors"

# Resume from dir and dump at once: which step it read, and that its
# parameters are those of the save of that step.
check_resume() { # check_resume DIR WHAT -> prints the step
  dir=$1 what=$2
  run "$tmp/check.log" "$xtrain" $common --checkpoint-dir "$dir" --resume \
    --max-steps 4 --dump-params "$tmp/got" || {
    cat "$tmp/check.log" >&2
    echo "FAIL: $what: --resume did not load" >&2
    return 1
  }
  step=$(sed -n 's/.*resumed from .*(sharded): epoch [0-9]*, step \([0-9]*\)$/\1/p' \
    "$tmp/check.log")
  case "$step" in
    4 | 8) ;;
    *) cat "$tmp/check.log" >&2
       echo "FAIL: $what: resumed from step '$step', not 4 or 8" >&2
       return 1 ;;
  esac
  "$compare" 0 "$tmp/ref$step.rank0" "$tmp/got.rank0" "$tmp/got.rank1" \
    > "$tmp/compare.log" || {
    cat "$tmp/compare.log" >&2
    echo "FAIL: $what: the parameters resumed are not step $step's" >&2
    return 1
  }
  echo "$step"
}

points=0
for rank in 0 1; do
  rm -rf "$tmp/d"
  cp -r "$tmp/base" "$tmp/d"
  must "$tmp/list.log" sh "$tmp/on_rank.sh" $rank list "$xtrain" $common \
    --checkpoint-dir "$tmp/d" --resume --max-steps 8
  list=$(sed -n "s/^\[rank $rank\] xtrain: fault point //p" "$tmp/list.log")
  [ -n "$list" ] || { cat "$tmp/list.log"; echo "FAIL: no fault point listed"; exit 1; }
  last=4
  for point in $list; do
    rm -rf "$tmp/d"
    cp -r "$tmp/base" "$tmp/d"
    if run "$tmp/kill.log" sh "$tmp/on_rank.sh" $rank "$point" "$xtrain" \
        $common --checkpoint-dir "$tmp/d" --resume --max-steps 8; then
      cat "$tmp/kill.log"
      echo "FAIL: rank $rank was not killed at $point"
      exit 1
    fi
    grep -q "^\[rank $rank\] xtrain: killed at fault point $point" "$tmp/kill.log" || {
      cat "$tmp/kill.log"
      echo "FAIL: rank $rank did not reach $point"
      exit 1
    }
    step=$(check_resume "$tmp/d" "rank $rank killed at $point")
    # Once the new index is in, every later point keeps it.
    if [ "$step" -lt "$last" ]; then
      echo "FAIL: rank $rank killed at $point resumed step $step after an earlier point gave $last"
      exit 1
    fi
    last=$step
    echo "rank $rank killed at $point: resumed step $step, bitwise"
    points=$((points + 1))
  done
  [ "$last" = 8 ] || { echo "FAIL: a kill after the whole save did not resume step 8"; exit 1; }
done

# After a kill mid-save the next save takes over: one generation left, and
# the run ends bitwise where the straight one did.
rm -rf "$tmp/d"
cp -r "$tmp/base" "$tmp/d"
run "$tmp/kill.log" sh "$tmp/on_rank.sh" 1 sharded_save.shard_written#2 \
  "$xtrain" $common --checkpoint-dir "$tmp/d" --resume --max-steps 8 || true
must "$tmp/again.log" "$xtrain" $common --checkpoint-dir "$tmp/d" --resume \
  --max-steps 8 --dump-params "$tmp/again"
"$compare" 0 "$tmp/ref8.rank0" "$tmp/again.rank0" "$tmp/again.rank1"
for stem in checkpoint_best checkpoint_latest; do
  g=$(sed -n 's/.*"generation":[^0-9]*\([0-9]*\).*/\1/p' "$tmp/d/$stem.index.json")
  files=$(ls "$tmp/d" | grep "^$stem\..*\.safetensors$" | tr '\n' ' ')
  [ "$files" = "$stem.g$g.rank0-of-2.safetensors $stem.g$g.rank1-of-2.safetensors " ] || {
    ls -la "$tmp/d"
    echo "FAIL: $stem: expected generation $g's two files only, found: $files"
    exit 1
  }
done

# A set with a missing shard: every rank refuses; nobody says resumed.
rm -rf "$tmp/d"
cp -r "$tmp/base" "$tmp/d"
rm "$tmp/d/checkpoint_latest.g1.rank1-of-2.safetensors"
if run "$tmp/missing.log" "$xtrain" $common --checkpoint-dir "$tmp/d" \
    --resume --max-steps 8; then
  cat "$tmp/missing.log"
  echo "FAIL: a set without rank 1's file resumed"
  exit 1
fi
grep -q "^\[rank 0\] .*rank 1 could not read its part of" "$tmp/missing.log" &&
  ! grep -q "resumed from" "$tmp/missing.log" || {
  cat "$tmp/missing.log"
  echo "FAIL: rank 0 did not refuse with rank 1, or a rank said it resumed"
  exit 1
}

# A set written before generations resumes, and the next save removes it.
rm -rf "$tmp/d"
cp -r "$tmp/base" "$tmp/d"
for r in 0 1; do
  mv "$tmp/d/checkpoint_latest.g1.rank$r-of-2.safetensors" \
    "$tmp/d/checkpoint_latest.rank$r-of-2.safetensors"
done
sed -e '/"generation"/d' -e 's/checkpoint_latest\.g1\.rank/checkpoint_latest.rank/' \
  "$tmp/base/checkpoint_latest.index.json" > "$tmp/d/checkpoint_latest.index.json"
[ "$(check_resume "$tmp/d" "a set without generations")" = 4 ]
must "$tmp/old.log" "$xtrain" $common --checkpoint-dir "$tmp/d" --resume \
  --max-steps 8
! ls "$tmp/d" | grep -q '^checkpoint_latest\.rank' || {
  ls -la "$tmp/d"
  echo "FAIL: the files of the set before generations were not removed"
  exit 1
}
echo "PASS: $points kill points resumed bitwise from the last complete save"
