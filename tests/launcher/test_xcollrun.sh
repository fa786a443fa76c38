#!/usr/bin/env bash
# test_xcollrun.sh - the launcher (tools/xcollrun.c) end to end: output
# prefixing, torchrun's environment per rank, failure handling (a failing
# rank stops the others, signals are named, SIGKILL after the grace period),
# signal forwarding, no orphans after a SIGKILL of xcollrun, --max-restarts,
# bad flags. Every run is bounded by
# `timeout`, so a launcher that hangs fails the test instead of blocking it.
#
# usage: test_xcollrun.sh path/to/xcollrun [path/to/xcoll-trace-merge]
set -u
XCOLLRUN=${1:?usage: test_xcollrun.sh path/to/xcollrun}
HERE=$(cd "$(dirname "$0")" && pwd)
MERGE=${2:-$HERE/../../tools/xcoll-trace-merge}
WORK=$(mktemp -d /tmp/xcollrun_test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
failures=0

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }
# expect_eq what expected actual
expect_eq() { if [ "$2" == "$3" ]; then pass "$1"; else fail "$1: expected '$2', got '$3'"; fi; }
expect_grep() { if grep -q -- "$2" "$3"; then pass "$1"; else fail "$1: '$2' not in $3:"; cat "$3"; fi; }

run() { # run SECONDS args... : xcollrun with stdout/stderr in $WORK/out, $WORK/err
  local limit=$1; shift
  timeout "$limit" "$XCOLLRUN" "$@" >"$WORK/out" 2>"$WORK/err"
}

# ---- prefixing and environment ----
unset OMP_NUM_THREADS OPENBLAS_NUM_THREADS
run 20 --nproc-per-node 3 sh -c 'echo "env $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR $MASTER_PORT $OMP_NUM_THREADS $OPENBLAS_NUM_THREADS"; echo "to stderr" >&2; printf "no newline"'
expect_eq "clean run exits 0" 0 $?
for r in 0 1 2; do
  expect_eq "rank $r env" "[rank $r] env $r 3 $r 3 0 127.0.0.1 29500 1 1" "$(grep "^\[rank $r\] env" "$WORK/out")"
  expect_eq "rank $r partial last line" "[rank $r] no newline" "$(grep "^\[rank $r\] no" "$WORK/out")"
  expect_eq "rank $r stderr stays on stderr" "[rank $r] to stderr" "$(grep "^\[rank $r\] to" "$WORK/err")"
done
expect_eq "stdout holds only prefixed lines" 6 "$(grep -c '^\[rank [0-2]\] ' "$WORK/out")"
expect_eq "stdout has 6 lines" 6 "$(wc -l <"$WORK/out")"

# second node of two, underscore flags, =value forms, preset OMP_NUM_THREADS kept
OMP_NUM_THREADS=4 run 20 --nnodes=2 --node_rank 1 --nproc_per_node=2 --master_addr=localhost --master-port 1234 \
  sh -c 'echo "env $RANK $WORLD_SIZE $LOCAL_RANK $GROUP_RANK $MASTER_ADDR $MASTER_PORT $OMP_NUM_THREADS"'
expect_eq "node 1 exits 0" 0 $?
expect_eq "node 1 local rank 0" "[rank 2] env 2 4 0 1 localhost 1234 4" "$(grep '^\[rank 2\]' "$WORK/out")"
expect_eq "node 1 local rank 1" "[rank 3] env 3 4 1 1 localhost 1234 4" "$(grep '^\[rank 3\]' "$WORK/out")"

# port 0: one free port, the same for every rank
run 20 --nproc-per-node 2 --master-port 0 sh -c 'echo "$MASTER_PORT"'
ports=$(sed 's/^\[rank .\] //' "$WORK/out" | sort -u)
if [ "$(echo "$ports" | wc -l)" = 1 ] && [ "$ports" -gt 0 ]; then pass "port 0 picks one port ($ports)"; else fail "port 0 gave '$ports'"; fi

# ---- failures ----
start=$SECONDS
run 20 --nproc-per-node 3 sh -c 'if [ "$RANK" = 1 ]; then echo "last words"; exit 3; fi; exec sleep 1000'
rc=$?
expect_eq "failing rank's status is the exit status" 3 $rc
if [ $((SECONDS - start)) -le 4 ]; then pass "failure stops the group quickly"; else fail "failure took $((SECONDS - start)) s"; fi
expect_grep "failure names rank and pid" 'xcollrun: rank 1 (pid [0-9]*) exited with status 3' "$WORK/err"
expect_grep "output before the failure is kept" '^\[rank 1\] last words' "$WORK/out"

run 20 --nproc-per-node 2 sh -c 'if [ "$RANK" = 0 ]; then kill -SEGV $$; fi; exec sleep 1000'
expect_eq "killed rank gives 128+signal" 139 $?
expect_grep "signal is named" 'rank 0 (pid [0-9]*) was killed by signal SIGSEGV' "$WORK/err"

# a rank that ignores SIGTERM (its sleep too) is killed after the grace period
start=$SECONDS
# (rank 1 fails only once rank 0 has installed its trap: otherwise SIGTERM
# could reach rank 0 before the trap and end it without the grace period)
XCOLLRUN_GRACE_S=0.5 TRAPPED="$WORK/rank0_trapped" run 20 --nproc-per-node 2 sh -c 'trap "" TERM; if [ "$RANK" = 1 ]; then while [ ! -e "$TRAPPED" ]; do sleep 0.01; done; exit 1; fi; touch "$TRAPPED"; sleep 1000'
expect_eq "SIGTERM-proof rank: exit status" 1 $?
if [ $((SECONDS - start)) -le 4 ]; then pass "SIGKILL after the grace period"; else fail "grace took $((SECONDS - start)) s"; fi
expect_grep "SIGKILL is reported" 'rank 0 (pid [0-9]*) did not exit 0.5 s after SIGTERM' "$WORK/err"

# --on-rank-failure continue: rank 1 dies, rank 0 is not stopped; it exits
# (with STATUS) once xcollrun has reported the death
for status in 0 1; do
  ERR="$WORK/err" STATUS=$status run 20 --nproc-per-node 2 --on-rank-failure continue sh -c 'if [ "$RANK" = 1 ]; then kill -KILL $$; fi; while ! grep -q "others run on" "$ERR"; do sleep 0.01; done; exit $STATUS'
  expect_eq "continue: a survivor exiting $status gives $status" $status $?
done
expect_grep "continue: the death is reported" 'rank 1 (pid [0-9]*) was killed by signal SIGKILL (Killed); the others run on (--on-rank-failure continue)' "$WORK/err"
run 20 --nproc-per-node 1 --on-rank-failure continue sh -c 'kill -KILL $$'
expect_eq "continue: no rank left gives 128+signal" 137 $?
run 20 --nproc-per-node 1 --on-rank-failure sometimes true
expect_eq "--on-rank-failure with a bad value exits 2" 2 $?

run 20 --nproc-per-node 1 "$WORK/does-not-exist"
expect_eq "missing program exits 127" 127 $?
expect_grep "missing program is named" "cannot run '$WORK/does-not-exist'" "$WORK/err"

# ---- SIGINT is passed to every rank ----
mkfifo "$WORK/fifo"
timeout 20 "$XCOLLRUN" --nproc-per-node 2 sh -c 'trap "echo got INT; exit 0" INT; echo ready; while :; do sleep 0.05; done' \
  >"$WORK/fifo" 2>"$WORK/err" &
launcher=$!
exec 3<"$WORK/fifo"
# both ranks have installed their trap once they print "ready"
read -r -t 10 line1 <&3; read -r -t 10 line2 <&3
kill -INT $launcher
cat <&3 >"$WORK/out"
exec 3<&-
wait $launcher
expect_eq "interrupted launcher exits 128+SIGINT" 130 $?
expect_eq "every rank got SIGINT" 2 "$(grep -c 'got INT' "$WORK/out")"

# ---- no orphans: a wrapper's children die with a SIGKILLed xcollrun ----
# Each rank is `bash -c 'sleep 300 & ... wait'`: the sleep is the wrapper's
# child, not xcollrun's. Once both have written their sleep's pid, xcollrun
# gets SIGKILL; within 10 s (polled) both sleeps must be gone. Before each
# rank had a keeper that kills its process group, they ran on for 300 s.
rm -f "$WORK/orphan".*
"$XCOLLRUN" --nproc-per-node 2 --master-port 0 bash -c \
  'sleep 300 & echo $! >'"$WORK"'/orphan.$RANK.tmp; mv '"$WORK"'/orphan.$RANK.tmp '"$WORK"'/orphan.$RANK; wait' \
  >/dev/null 2>&1 &
launcher=$!
for _ in $(seq 200); do
  [ -s "$WORK/orphan.0" ] && [ -s "$WORK/orphan.1" ] && break
  sleep 0.05
done
# (xcollrun itself, not under timeout: the SIGKILL must reach it; it is
# killed below whatever happens)
orphans="$(cat "$WORK/orphan.0" "$WORK/orphan.1" 2>/dev/null | tr '\n' ' ')"
expect_eq "both wrappers started a child" 2 "$(echo $orphans | wc -w)"
kill -KILL $launcher
wait $launcher 2>/dev/null
left=$orphans
for _ in $(seq 200); do
  left=""
  for pid in $orphans; do kill -0 "$pid" 2>/dev/null && left="$left $pid"; done
  [ -z "$left" ] && break
  sleep 0.05
done
if [ -z "$left" ]; then
  pass "a wrapper's children die with a SIGKILLed xcollrun"
else
  fail "still running after xcollrun's SIGKILL:$left"
  kill -KILL $left 2>/dev/null
fi

# ---- restarts ----
counter="$WORK/attempts"
: >"$counter"
run 30 --nproc-per-node 2 --max-restarts 2 --master-port 0 sh -c '
  echo "$TORCHELASTIC_RESTART_COUNT $MASTER_PORT"
  [ "$RANK" = 0 ] && echo x >>'"$counter"'
  if [ "$TORCHELASTIC_RESTART_COUNT" -lt 2 ]; then
    if [ "$RANK" = 0 ]; then exit 5; fi
    exec sleep 1000
  fi'
expect_eq "third attempt succeeds" 0 $?
expect_eq "group started three times" 3 "$(wc -l <"$counter")"
expect_eq "restarts get fresh ports" 3 "$(grep '^\[rank 0\]' "$WORK/out" | awk '{print $4}' | sort -u | wc -l)"
expect_grep "restart is announced" 'restarting the local group (restart 2 of 2)' "$WORK/err"
run 30 --nproc-per-node 1 --max-restarts 1 sh -c 'exit 6'
expect_eq "restarts exhausted: failure status" 6 $?
expect_eq "two failures reported" 2 "$(grep -c 'exited with status 6' "$WORK/err")"

# ---- bad flags ----
for args in "--bogus 1 true" "--nproc-per-node 0 true" "--nproc-per-node x true" "--nproc-per-node=3x true" \
  "--nnodes 2 --node-rank 2 true" "--node_rank -1 true" "--master-port 70000 true" "--nproc-per-node" \
  "--nproc-per-node 2" "--nnodes 2 --master-port 0 true" "-x true"; do
  # shellcheck disable=SC2086
  run 10 $args
  expect_eq "bad flags '$args' exit 2" 2 $?
  expect_grep "bad flags '$args' point to --help" "^see 'xcollrun --help'$" "$WORK/err"
  expect_eq "bad flags '$args' print two lines" 2 "$(wc -l <"$WORK/err")"
done
# ---- torchrun's rendezvous flags ----
run 10 --rdzv-endpoint localhost:1234 --rdzv-id job7 --rdzv-backend c10d --nproc-per-node 2 \
  sh -c 'echo "$MASTER_ADDR $MASTER_PORT $TORCHELASTIC_RUN_ID"'
expect_eq "--rdzv-endpoint and --rdzv-id exit 0" 0 $?
expect_eq "--rdzv-endpoint sets the master, --rdzv-id the run id" \
  "[rank 0] localhost 1234 job7|[rank 1] localhost 1234 job7" "$(sort "$WORK/out" | paste -sd'|' -)"
run 10 --rdzv_endpoint=[::1]:99 --rdzv_backend=static sh -c 'echo "$MASTER_ADDR $MASTER_PORT"'
expect_eq "--rdzv_endpoint=[IPV6]:PORT" "[rank 0] ::1 99" "$(cat "$WORK/out")"
run 10 --rdzv-endpoint otherhost --master-port 4321 sh -c 'echo "$MASTER_ADDR $MASTER_PORT"'
expect_eq "--rdzv-endpoint without a port keeps --master-port" "[rank 0] otherhost 4321" "$(cat "$WORK/out")"
run 10 --role trainer --monitor-interval 5 --start-method spawn --local-addr 10.0.0.1 \
  --rdzv-conf join_timeout=60 true
expect_eq "ignored torchrun flags exit 0" 0 $?
for flag in --role --monitor-interval --start-method --local-addr --rdzv-conf; do
  expect_eq "$flag: one 'ignored' line" 1 "$(grep -c "^xcollrun: ignored: $flag .*: " "$WORK/err")"
done
expect_eq "only the ignored lines on stderr" 5 "$(wc -l <"$WORK/err")"
for args in "--rdzv-backend etcd true" "--rdzv-endpoint a:b:c true" "--rdzv-endpoint host:x true" \
  "--rdzv-endpoint :80 true" "--rdzv-id= true"; do
  # shellcheck disable=SC2086
  run 10 $args
  expect_eq "bad rendezvous flags '$args' exit 2" 2 $?
  expect_eq "bad rendezvous flags '$args' print two lines" 2 "$(wc -l <"$WORK/err")"
done
run 10 --rdzv-backend etcd-v2 true
expect_grep "an unsupported --rdzv-backend says what works" "--rdzv-backend etcd-v2: .*give static or c10d" "$WORK/err"

run 10 --help
expect_eq "--help exits 0" 0 $?
expect_grep "--help prints usage" 'usage: xcollrun' "$WORK/out"
run 10 -- sh -c 'echo "$WORLD_SIZE"'
expect_eq "-- ends options; default one rank" "[rank 0] 1" "$(cat "$WORK/out")"

# ---- Python programs, as torchrun runs them ----
printf '#!/bin/sh\necho "py: $*"\n' >"$WORK/fakepy"
printf '#!/bin/sh\necho "direct $RANK"\n' >"$WORK/tool.py"
chmod +x "$WORK/fakepy" "$WORK/tool.py"
XCOLLRUN_PYTHON=$WORK/fakepy run 10 --nproc-per-node 1 script.py --lr 1
expect_eq "a .py program runs with XCOLLRUN_PYTHON" "[rank 0] py: script.py --lr 1" "$(cat "$WORK/out")"
XCOLLRUN_PYTHON=$WORK/fakepy run 10 -m pkg.train --epochs 2
expect_eq "-m runs a module" "[rank 0] py: -m pkg.train --epochs 2" "$(cat "$WORK/out")"
XCOLLRUN_PYTHON=$WORK/fakepy run 10 --no-python "$WORK/tool.py"
expect_eq "--no-python runs a .py as it is" "[rank 0] direct 0" "$(cat "$WORK/out")"
run 10 -m --no-python x
expect_eq "-m with --no-python exits 2" 2 $?
run 10 -m
expect_eq "-m without a module exits 2" 2 $?

# ---- torchrun's output and placement flags ----
run 20 --standalone --nproc-per-node 2 sh -c 'echo "$MASTER_ADDR $MASTER_PORT"'
expect_eq "--standalone exits 0" 0 $?
port=$(sed -n 's/^\[rank 0\] 127.0.0.1 \([0-9]*\)$/\1/p' "$WORK/out")
expect_eq "--standalone: 127.0.0.1 and a free port, the same on both ranks" \
  "2 1" "$(wc -l <"$WORK/out" | tr -d ' ') $(grep -c " $port\$" "$WORK/out" | sed 's/2/1/')"
[ "$port" != 29500 ] && [ -n "$port" ] && pass "--standalone picked port $port" || fail "--standalone port '$port'"
run 10 --standalone --nnodes 2 true
expect_eq "--standalone with --nnodes 2 exits 2" 2 $?
run 20 --nproc-per-node cpu sh -c 'echo "$LOCAL_WORLD_SIZE"'
cores=$(python3 -c 'import os; print(len(os.sched_getaffinity(0)))' 2>/dev/null || nproc)
expect_eq "--nproc-per-node cpu starts one rank per usable core" "$cores" "$(grep -c '' "$WORK/out")"
mkdir -p "$WORK/gpus/0000:01:00.0" "$WORK/gpus/0000:02:00.0" "$WORK/nogpus"
XCOLLRUN_GPU_DIR=$WORK/gpus run 20 --nproc-per-node gpu sh -c 'echo "$LOCAL_WORLD_SIZE"'
expect_eq "--nproc-per-node gpu counts the driver's GPUs" "[rank 0] 2" "$(grep '^\[rank 0\]' "$WORK/out")"
XCOLLRUN_GPU_DIR=$WORK/nogpus run 20 --nproc-per-node auto sh -c 'echo "$LOCAL_WORLD_SIZE"'
expect_eq "--nproc-per-node auto without GPUs is cpu" "[rank 0] $cores" "$(grep '^\[rank 0\]' "$WORK/out")"
XCOLLRUN_GPU_DIR=$WORK/nogpus run 10 --nproc-per-node gpu true
expect_eq "--nproc-per-node gpu without a GPU exits 2" 2 $?
expect_grep "--nproc-per-node gpu says why" 'no NVIDIA GPU found' "$WORK/err"
run 20 --nproc-per-node 3 --log-dir "$WORK/logs" --tee 1 --redirects 0:2 \
  --local-ranks-filter 0,2 sh -c 'echo "out $RANK"; echo "err $RANK" >&2'
expect_eq "logs run exits 0" 0 $?
expect_eq "filter: only ranks 0 and 2 on stdout" "[rank 0] out 0|[rank 2] out 2" "$(sort "$WORK/out" | paste -sd'|')"
expect_grep "rank 2's stderr is shown" '^\[rank 2\] err 2$' "$WORK/err"
if grep -q 'err 0' "$WORK/err"; then fail "--redirects 0:2 still shows rank 0's stderr"; else pass "--redirects 0:2 hides rank 0's stderr"; fi
expect_eq "--redirects 0:2 writes rank 0's stderr.log" "err 0" "$(cat "$WORK/logs/attempt_0/0/stderr.log")"
expect_eq "--tee 1 writes every rank's stdout.log" "out 0|out 1|out 2" \
  "$(cat "$WORK/logs/attempt_0/0/stdout.log" "$WORK/logs/attempt_0/1/stdout.log" "$WORK/logs/attempt_0/2/stdout.log" | paste -sd'|')"
[ ! -e "$WORK/logs/attempt_0/1/stderr.log" ] && pass "no stderr.log where nothing asked for it" || fail "rank 1 has a stderr.log"
for args in "--redirects 4" "--tee 0:1,x:2" "--redirects 5:1" "--local-ranks-filter 2" "--local-ranks-filter a"; do
  run 10 --nproc-per-node 2 $args true
  expect_eq "bad '$args' exits 2" 2 $?
done
XCOLLRUN_PYTHON=$WORK/fakepy run 10 --run-path "$WORK/train_script" --lr 1
expect_eq "--run-path runs any file with Python" "[rank 0] py: $WORK/train_script --lr 1" "$(cat "$WORK/out")"
# a single rank chosen by the filter gets the terminal itself (script(1)
# gives xcollrun a pseudo-terminal); without the filter, ranks see a pipe
if command -v script >/dev/null; then
  timeout 20 script -qec "$XCOLLRUN --nproc-per-node 2 --local-ranks-filter 1 sh -c 'if [ -t 1 ]; then echo tty \$RANK; else echo pipe \$RANK; fi'" /dev/null >"$WORK/tty" 2>&1
  expect_eq "filtered rank on a terminal gets the terminal" "tty 1" "$(tr -d '\r' <"$WORK/tty")"
  timeout 20 script -qec "$XCOLLRUN --nproc-per-node 2 sh -c 'if [ -t 1 ]; then echo tty \$RANK; else echo pipe \$RANK; fi'" /dev/null >"$WORK/tty" 2>&1
  expect_eq "without a filter ranks write to a pipe" "[rank 0] pipe 0|[rank 1] pipe 1" "$(tr -d '\r' <"$WORK/tty" | sort | paste -sd'|')"
else
  echo "skip: script(1) not found: terminal pass-through not checked"
fi

# ---- xcoll-trace-merge ----
if [ -x "$MERGE" ] && command -v python3 >/dev/null; then
  printf '[\n{"name":"process_name","ph":"M","pid":0,"tid":0,"args":{"name":"rank 0"}},\n{"name":"a","cat":"c","ph":"X","ts":1,"dur":2,"pid":0,"tid":1,"args":{}}\n]\n' >"$WORK/t.rank0.json"
  # rank 1 died: no closing bracket
  printf '[\n{"name":"process_name","ph":"M","pid":1,"tid":0,"args":{"name":"rank 1"}},\n{"name":"b","cat":"c","ph":"X","ts":3,"dur":1,"pid":1,"tid":1,"args":{}}' >"$WORK/t.rank1.json"
  timeout 20 "$MERGE" -o "$WORK/merged.json" "$WORK/t.rank0.json" "$WORK/t.rank1.json" 2>"$WORK/err"
  expect_eq "trace merge exits 0" 0 $?
  expect_eq "merged trace has both ranks' events" "4 [0, 1]" "$(python3 -c '
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
print(len(events), sorted({e["pid"] for e in events}))' "$WORK/merged.json")"
else
  echo "skip: xcoll-trace-merge or python3 not found"
fi

if [ $failures -ne 0 ]; then echo "$failures check(s) failed"; exit 1; fi
echo "all launcher checks passed"
