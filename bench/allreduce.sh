#!/bin/sh
# allreduce.sh - run the allreduce comparison (xcoll vs torch.distributed gloo
# vs Open MPI) in one go; bench/allreduce.py holds the logic and --help.
# Any python3 will do for the driver: it looks for one with torch itself.
exec python3 "$(dirname "$0")/allreduce.py" "$@"
