#!/usr/bin/env bash
# nl_env.sh - one malformed nccl_like variable at communicator creation:
# XCOLL_ERR_ENV (10) naming the variable, within 3 s. A world of one rank in
# a clean environment (env -i), through tests/faults/fault_init.c.
#   nl_env.sh FAULT_INIT_BINARY CASE
set -u
bin=$1
case_name=$2
port=$("$bin" --free-port) || { echo "cannot find a free port"; exit 1; }
case $case_name in
nchannels_0) var=XCOLL_NCHANNELS value=0 ;;
nchannels_33) var=XCOLL_NCHANNELS value=33 ;;
buffsize_12q) var=XCOLL_BUFFSIZE value=12Q ;;
buffsize_100) var=XCOLL_BUFFSIZE value=100 ;;
proto_fast) var=XCOLL_PROTO value=fast ;;
*) echo "unknown case '$case_name'"; exit 2 ;;
esac
echo "+ env -i XCOLL_BACKEND=nccl_like $var=$value fault_init"
timeout -k 2 20 env -i PATH="$PATH" MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" \
  XCOLL_TIMEOUT_S=3 WORLD_SIZE=1 RANK=0 XCOLL_BACKEND=nccl_like \
  "$var=$value" "$bin" --collective --expect 10 --contains "$var" --max-s 3
