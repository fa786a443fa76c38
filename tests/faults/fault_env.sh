#!/usr/bin/env bash
# fault_env.sh - one bad-environment case for communicator creation.
#   fault_env.sh FAULT_INIT_BINARY CASE
# Runs fault_init (tests/faults/fault_init.c) in a clean environment (env -i:
# no launcher variable leaks in from the caller) with one thing wrong, and
# passes if xcoll returns the expected status, in bounded time, with a message
# naming the variable / address / port. Cases:
#   no_master      WORLD_SIZE=2 RANK=1, nothing listens on MASTER_PORT:
#                  XCOLL_ERR_TIMEOUT after XCOLL_TIMEOUT_S=2 (1.5..4.5 s),
#                  message names 127.0.0.1 and the port
#   port_taken     RANK=0 while another socket holds MASTER_PORT:
#                  XCOLL_ERR_SYSTEM naming the port, at once
#   rank_abc, world_size_0, rank_out_of_range, master_port_70000,
#   backend_nope, timeout_negative, algo_bogus, debug_loud, nsocks_0,
#   chunk_size_12q: XCOLL_ERR_ENV (or NOT_SUPPORTED for the backend) naming
#                  the variable, within 3 s
#   proto_ll128_on_tcp, ib_timeout_99_on_tcp: a malformed variable of another
#                  backend (nccl_like, its ibverbs plugin) fails tcp's
#                  creation too: XCOLL_ERR_ENV naming it
set -u
bin=$1
case_name=$2
port=$("$bin" --free-port) || { echo "cannot find a free port"; exit 1; }

# Status numbers from include/xcoll.h.
SYSTEM=3 TIMEOUT=5 NOT_SUPPORTED=8 ENV=10

base=(PATH="$PATH" MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" XCOLL_TIMEOUT_S=3)
one=(WORLD_SIZE=1 RANK=0)
run() { # run ENV... -- fault_init args...
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  echo "+ env -i ${envs[*]} fault_init $*"
  timeout -k 2 20 env -i "${envs[@]}" "$bin" "$@"
  local rc=$?
  [ $rc -eq 124 ] && echo "FAIL: fault_init did not return within 20 s"
  return $rc
}

case $case_name in
no_master)
  run "${base[@]}" WORLD_SIZE=2 RANK=1 XCOLL_TIMEOUT_S=2 -- \
    --expect $TIMEOUT --contains 127.0.0.1 --contains "$port" \
    --min-s 1.5 --max-s 4.5 ;;
port_taken)
  run "${base[@]}" WORLD_SIZE=2 RANK=0 -- \
    --occupy-master-port --expect $SYSTEM --contains @PORT@ --max-s 2 ;;
rank_abc)
  run "${base[@]}" WORLD_SIZE=2 RANK=abc -- \
    --expect $ENV --contains RANK --contains abc --max-s 3 ;;
world_size_0)
  run "${base[@]}" WORLD_SIZE=0 RANK=0 -- \
    --expect $ENV --contains WORLD_SIZE --max-s 3 ;;
rank_out_of_range)
  run "${base[@]}" WORLD_SIZE=2 RANK=2 -- \
    --expect $ENV --contains RANK --max-s 3 ;;
master_port_70000)
  run "${base[@]}" WORLD_SIZE=2 RANK=1 MASTER_PORT=70000 -- \
    --expect $ENV --contains MASTER_PORT --max-s 3 ;;
backend_nope)
  run "${base[@]}" "${one[@]}" XCOLL_BACKEND=nope -- \
    --collective --expect $ENV,$NOT_SUPPORTED --contains XCOLL_BACKEND \
    --contains nope --contains tcp \
    --max-s 3 ;;
timeout_negative)
  run "${base[@]}" "${one[@]}" XCOLL_TIMEOUT_S=-1 -- \
    --collective --expect $ENV --contains XCOLL_TIMEOUT_S --max-s 3 ;;
algo_bogus)
  run "${base[@]}" "${one[@]}" XCOLL_ALGO=bogus -- \
    --collective --expect $ENV --contains XCOLL_ALGO --max-s 3 ;;
debug_loud)
  run "${base[@]}" "${one[@]}" XCOLL_DEBUG=LOUD -- \
    --collective --expect $ENV --contains XCOLL_DEBUG --max-s 3 ;;
nsocks_0)
  run "${base[@]}" "${one[@]}" XCOLL_NSOCKS_PERPEER=0 -- \
    --collective --expect $ENV --contains XCOLL_NSOCKS_PERPEER --max-s 3 ;;
chunk_size_12q)
  run "${base[@]}" "${one[@]}" XCOLL_CHUNK_SIZE=12Q -- \
    --collective --expect $ENV --contains XCOLL_CHUNK_SIZE --max-s 3 ;;
proto_ll128_on_tcp)
  run "${base[@]}" "${one[@]}" XCOLL_BACKEND=tcp XCOLL_PROTO=ll128 -- \
    --collective --expect $ENV --contains XCOLL_PROTO --contains ll128 \
    --max-s 3 ;;
ib_timeout_99_on_tcp)
  run "${base[@]}" "${one[@]}" XCOLL_BACKEND=tcp XCOLL_IB_TIMEOUT=99 -- \
    --collective --expect $ENV --contains XCOLL_IB_TIMEOUT --max-s 3 ;;
*)
  echo "unknown case '$case_name'"; exit 2 ;;
esac
