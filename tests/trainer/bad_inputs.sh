#!/bin/sh
# bad_inputs.sh XTRAIN DATA_DIR
# Missing, truncated and corrupt data files, a missing directory and bad
# flags must each fail with the documented exit status and a message that
# names the file (or the Debian package, or the flag).
set -u
xtrain=$1 data=$2
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

run() { "$xtrain" --max-steps 1 --test-limit 10 "$@"; }

expect 1 "dataset-fashion-mnist" -- run --data-dir "$tmp/nonexistent"

mkdir "$tmp/missing"
cp "$data"/train-*.gz "$tmp/missing/"
expect 1 "missing/t10k-images-idx3-ubyte.gz" -- run --data-dir "$tmp/missing"

mkdir "$tmp/truncated"
cp "$data"/*.gz "$tmp/truncated/"
head -c 100000 "$data/train-images-idx3-ubyte.gz" > "$tmp/truncated/train-images-idx3-ubyte.gz"
expect 1 "truncated/train-images-idx3-ubyte.gz" -- run --data-dir "$tmp/truncated"

# Valid gzip, wrong content: labels where images are expected (bad magic).
mkdir "$tmp/magic"
cp "$data"/*.gz "$tmp/magic/"
cp "$data/train-labels-idx1-ubyte.gz" "$tmp/magic/train-images-idx3-ubyte.gz"
expect 1 "magic/train-images-idx3-ubyte.gz.*magic" -- run --data-dir "$tmp/magic"

# Bytes flipped in the middle of the compressed stream: a CRC/inflate error.
mkdir "$tmp/corrupt"
cp "$data"/*.gz "$tmp/corrupt/"
f="$tmp/corrupt/t10k-labels-idx1-ubyte.gz"
size=$(wc -c < "$f")
printf '\377\377\377\377\377\377\377\377' | dd of="$f" bs=1 seek=$((size / 2)) conv=notrunc 2> /dev/null
expect 1 "corrupt/t10k-labels-idx1-ubyte.gz" -- run --data-dir "$tmp/corrupt"

# Image and label counts that disagree: a label file of another split.
mkdir "$tmp/count"
cp "$data"/*.gz "$tmp/count/"
cp "$data/train-labels-idx1-ubyte.gz" "$tmp/count/t10k-labels-idx1-ubyte.gz"
expect 1 "t10k-labels-idx1-ubyte.gz.*60000 labels.*10000 images" -- run --data-dir "$tmp/count"

# Not a gzip file at all, too short for a header.
mkdir "$tmp/garbage"
cp "$data"/*.gz "$tmp/garbage/"
printf 'hello' > "$tmp/garbage/train-labels-idx1-ubyte.gz"
expect 1 "garbage/train-labels-idx1-ubyte.gz" -- run --data-dir "$tmp/garbage"

# A bad flag: one line naming it, one pointing to --help, nothing more.
expect_short() {
  expect 2 "$@"
  lines=$(wc -l < "$tmp/err")
  if [ "$lines" -ne 2 ] || ! grep -q "^see 'xtrain --help'$" "$tmp/err"; then
    echo "FAIL: $* printed $lines lines, want 2 ending in see 'xtrain --help'"
    failures=$((failures + 1))
  fi
}
expect_short "--model must be" -- "$xtrain" --model resnet
expect_short "--strategy must be" -- "$xtrain" --strategy fsdp2
expect_short "--epochs expects an integer" -- "$xtrain" --epochs 0
expect_short "--batch-size expects an integer" -- "$xtrain" --batch-size x
expect_short "--lr needs a value" -- "$xtrain" --lr
expect_short "unknown option '--no-such-flag'" -- "$xtrain" --no-such-flag
expect_short "--resume needs --checkpoint-dir" -- "$xtrain" --resume
expect_short "--cnn-channels expects C1,C2" -- "$xtrain" --cnn-channels 6
expect_short "unexpected argument 'extra-argument'" -- "$xtrain" extra-argument
expect 2 "--sharding must be full_shard, shard_grad_op, no_shard or hybrid_shard, got 'zero3'" -- "$xtrain" --strategy fsdp --sharding zero3
expect 2 "--backward-prefetch must be pre, post or none" -- "$xtrain" --strategy fsdp --backward-prefetch early
expect 2 "--forward-prefetch must be on or off" -- "$xtrain" --strategy fsdp --forward-prefetch yes
expect 2 "need --strategy fsdp" -- "$xtrain" --sharding full_shard
expect 2 "--strategy must be none, dp, ddp or fsdp" -- "$xtrain" --strategy zero
expect 2 "--dp-devices needs --strategy dp" -- "$xtrain" --dp-devices 2
expect 2 "--dp-devices expects an integer" -- "$xtrain" --strategy dp --dp-devices 0
expect 2 "give at least one sample per replica" -- "$xtrain" --strategy dp --dp-devices 4 --batch-size 2
expect 2 "--param-dtype must be float32, bfloat16 or float16, got 'fp8'" -- "$xtrain" --strategy fsdp --param-dtype fp8
expect 2 "--param-dtype needs --strategy fsdp" -- "$xtrain" --strategy ddp --param-dtype bfloat16
expect 2 "--reduce-dtype needs --strategy ddp or fsdp" -- "$xtrain" --reduce-dtype bfloat16
expect 2 "--comm-hook must be none, fp16, bf16 or powersgd" -- "$xtrain" --strategy ddp --comm-hook topk
expect 2 "--comm-hook needs --strategy ddp" -- "$xtrain" --strategy fsdp --comm-hook fp16
expect 2 "give one of them" -- "$xtrain" --strategy ddp --comm-hook powersgd --reduce-dtype bfloat16
expect 2 "need --comm-hook powersgd" -- "$xtrain" --strategy ddp --powersgd-rank 4
expect 2 "loss scaling is for float16" -- "$xtrain" --strategy ddp --reduce-dtype bfloat16 --init-scale 1024
expect 2 "--powersgd-rank expects an integer" -- "$xtrain" --strategy ddp --comm-hook powersgd --powersgd-rank 0
expect 2 "--checkpoint-format sharded needs --strategy fsdp" -- "$xtrain" --checkpoint-dir "$tmp/ck" --checkpoint-format sharded
expect 2 "--checkpoint-format must be full or sharded" -- "$xtrain" --strategy fsdp --checkpoint-format local
expect 2 "--sampler must be random or sequential" -- "$xtrain" --sampler shuffled
expect 1 "cannot open --init-from file" -- "$xtrain" --data-dir "$data" --train-limit 64 --init-from "$tmp/none.safetensors"
printf 'not a safetensors file' > "$tmp/junk.safetensors"
expect 1 "junk.safetensors: header length .* not a safetensors file" -- "$xtrain" --data-dir "$data" --train-limit 64 --init-from "$tmp/junk.safetensors"

if [ "$failures" -ne 0 ]; then
  echo "$failures case(s) failed"
  exit 1
fi
