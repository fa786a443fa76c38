#!/bin/sh
# gpt_data.sh XTRAIN
# --model gpt's data and flags: --data-file on a small file trains and
# reports a validation loss and a sample; a missing fortunes directory names
# the Debian package; a missing file, an empty one, one too short for a
# training and a validation window, and bad flags each fail with the
# documented status (1 for data, 2 for usage) and a message naming the
# file or the flag.
set -u
xtrain=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

# expect STATUS PATTERN -- command...
expect() {
  want=$1 pattern=$2
  shift 3
  "$@" > "$tmp/out" 2> "$tmp/err"
  got=$?
  if [ "$got" -ne "$want" ] || ! grep -q -- "$pattern" "$tmp/err"; then
    echo "FAIL: $* -> status $got (want $want), stderr:"
    cat "$tmp/err"
    echo "(wanted a message matching '$pattern')"
    failures=$((failures + 1))
  else
    echo "ok: $* -> $got: $(head -n 1 "$tmp/err")"
  fi
}

tiny="--model gpt --n-layer 1 --n-head 2 --d-model 8 --context 8 --batch-size 4"
run() { "$xtrain" $tiny --max-steps 2 "$@"; }

# A small file of 40 lines: 90% train, 10% validation, windows of 9 bytes.
i=0
while [ $i -lt 40 ]; do
  echo "line $i: the quick brown fox jumps over the lazy dog" >> "$tmp/small.txt"
  i=$((i + 1))
done
if run --data-file "$tmp/small.txt" > "$tmp/small.log" 2>&1 &&
  grep -q "text [0-9]* bytes from 1 file(s)" "$tmp/small.log" &&
  grep -q "^epoch 0 (partial): loss [0-9.]* val_loss [0-9.]* val_bpc" "$tmp/small.log" &&
  grep -q "^sample (temperature" "$tmp/small.log"; then
  echo "ok: --data-file $tmp/small.txt trains, evaluates and samples"
else
  echo "FAIL: --data-file on a small file:"
  cat "$tmp/small.log"
  failures=$((failures + 1))
fi

expect 1 "fortunes" -- run --data-dir "$tmp/nonexistent"
expect 1 "missing.txt" -- run --data-file "$tmp/missing.txt"
: > "$tmp/empty.txt"
expect 1 "empty.txt is empty" -- run --data-file "$tmp/empty.txt"
# 50 bytes: 45 train, 5 validation, less than one window of 9.
head -c 50 "$tmp/small.txt" > "$tmp/short.txt"
expect 1 "short.txt has 50 bytes: too short" -- run --data-file "$tmp/short.txt"
expect 1 "not a regular file" -- run --data-file "$tmp"

expect 2 "--d-model 10 is not divisible by --n-head 4" -- \
  "$xtrain" --model gpt --d-model 10 --n-head 4
expect 2 "--n-layer expects an integer in \[1, 20\]" -- \
  "$xtrain" --model gpt --n-layer 0
expect 2 "--n-layer expects an integer in \[1, 20\]" -- \
  "$xtrain" --model gpt --n-layer 21
expect 2 "--context expects an integer" -- "$xtrain" --model gpt --context 0
expect 2 "--d-model expects an integer" -- "$xtrain" --model gpt --d-model x
expect 2 "need --model gpt" -- "$xtrain" --model mlp --n-layer 2
expect 2 "need --model gpt" -- "$xtrain" --data-file "$tmp/small.txt"
expect 2 "not both" -- "$xtrain" --model gpt --data-file "$tmp/small.txt" --data-dir "$tmp"
expect 2 "--model must be mlp, cnn or gpt" -- "$xtrain" --model transformer

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
