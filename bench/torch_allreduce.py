#!/usr/bin/env python3
"""torch.distributed (gloo) peer of bench/allreduce.sh.

Times a float32 collective (--coll, sum where it reduces; SIZE as
nccl-tests and bench/mpi_allreduce.c take it): all_reduce, broadcast (from
rank 0) and reduce (to rank 0) in place on SIZE bytes; all_gather_single
into SIZE bytes, reduce_scatter_single and all_to_all_single from SIZE
bytes, out of place (--alltoall is --coll alltoall). Timed exactly as
xcoll-perf and bench/mpi_allreduce.c do: per size, WARMUP untimed calls, a barrier, ITERS
timed calls (time.perf_counter, a monotonic clock); the time of the size is the
mean per call on the slowest rank (an all_reduce MAX of the means). One more
call on known small-integer inputs is then checked element by element.
--nonblocking: each call with async_op=True and its Work waited for at once.

    python3 bench/torch_allreduce.py --nproc 4 --port 29600 4096:50:5 1048576:20:2

Without RANK in the environment it starts --nproc copies of itself with
torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT),
so it also runs unchanged under `python3 -m torch.distributed.run`.
Rank 0 prints one JSON object per size:
    {"peer": "gloo", "world_size": N, "size": B, "iters": I, "time_us": T, "wrong": W}
Exit status: 0; 1 on a wrong result or a failed rank; 2 on a bad argument.
"""
import argparse
import json
import os
import subprocess
import sys
import time


def parse_plan(text):
    try:
        size, iters, warmup = (int(x) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad SIZE:ITERS:WARMUP '{text}'")
    if size % 4 or iters < 1 or warmup < 0:
        raise argparse.ArgumentTypeError(
            f"bad SIZE:ITERS:WARMUP '{text}': SIZE a multiple of 4, ITERS >= 1")
    return size, iters, warmup


def launch(args, argv):
    """Start one process per rank and wait for all of them (bounded)."""
    procs = []
    for rank in range(args.nproc):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(args.nproc),
                   LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(args.nproc),
                   MASTER_ADDR=args.master_addr, MASTER_PORT=str(args.port))
        procs.append(subprocess.Popen([sys.executable, __file__] + argv, env=env))
    deadline = time.monotonic() + args.timeout
    status = 0
    for proc in procs:
        try:
            code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print(f"torch_allreduce: a rank ran past --timeout {args.timeout} s",
                  file=sys.stderr)
            for p in procs:
                p.kill()
            return 1
        status = status or code
    return status


def run_rank(args):
    import torch
    import torch.distributed as dist

    # One thread per rank: the host has few cores and every rank shares them.
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    max_count = max(size for size, _, _ in args.plans) // 4
    buffer = torch.zeros(max(1, max_count), dtype=torch.float32)
    wrong_total = 0
    coll = args.coll
    blocked = coll in ("allgather", "reduce_scatter", "alltoall")
    received = torch.zeros_like(buffer) if blocked else None
    # The _single names of torch 2.x; the _tensor ones before them.
    all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    reduce_scatter = (getattr(dist, "reduce_scatter_single", None)
                      or dist.reduce_scatter_tensor)

    def issue(view, out, async_op):
        if coll == "alltoall":
            return dist.all_to_all_single(out, view, async_op=async_op)
        if coll == "allgather":
            return all_gather(out, view, async_op=async_op)
        if coll == "reduce_scatter":
            return reduce_scatter(out, view, async_op=async_op)
        if coll == "broadcast":
            return dist.broadcast(view, src=0, async_op=async_op)
        if coll == "reduce":
            return dist.reduce(view, dst=0, async_op=async_op)
        return dist.all_reduce(view, async_op=async_op)

    def call(view, out):
        if args.nonblocking:
            issue(view, out, True).wait()
        else:
            issue(view, out, False)

    def total(index):
        want = torch.zeros(index.numel(), dtype=torch.float32)
        for r in range(world_size):
            want += ((index + 3 * r) % 5).to(torch.float32)
        return want

    for size, iters, warmup in args.plans:
        count = size // 4
        block = count // world_size
        # An allgather sends one block: SIZE is what it receives.
        view = buffer[: block if coll == "allgather" else count]
        out = None
        if blocked:
            out = received[: block if coll == "reduce_scatter" else count]
        for _ in range(warmup):
            call(view, out)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            call(view, out)
        mean = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64)
        dist.all_reduce(mean, op=dist.ReduceOp.MAX)

        index = torch.arange(view.numel(), dtype=torch.int64)
        view.copy_(((index + 3 * rank) % 5).to(torch.float32))
        call(view, out)
        got = out if blocked else view
        position = torch.arange(got.numel(), dtype=torch.int64)
        if coll == "alltoall":
            # Block s of the result is block rank of rank s's input.
            source = position // block
            want = ((rank * block + position % block + 3 * source) % 5).to(torch.float32)
        elif coll == "allgather":
            # Block s of the result is rank s's input.
            source = position // block
            want = ((position % block + 3 * source) % 5).to(torch.float32)
        elif coll == "reduce_scatter":
            want = total(rank * block + position)
        elif coll == "broadcast":
            want = (position % 5).to(torch.float32)
        elif coll == "reduce" and rank != 0:
            want = got  # only the root's result is defined
        else:
            want = total(position)
        wrong = torch.tensor([int((got != want).sum())], dtype=torch.int64)
        dist.all_reduce(wrong)
        wrong_total += int(wrong)
        if rank == 0:
            print(json.dumps({"peer": "gloo", "world_size": world_size, "size": size,
                              "iters": iters, "time_us": float(mean) * 1e6,
                              "wrong": int(wrong)}), flush=True)
    dist.destroy_process_group()
    return 1 if wrong_total else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("plans", nargs="+", type=parse_plan, metavar="SIZE:ITERS:WARMUP")
    parser.add_argument("--nproc", type=int, default=2, help="ranks to start")
    parser.add_argument("--port", type=int, default=29600, help="MASTER_PORT")
    parser.add_argument("--master-addr", default="127.0.0.1")
    parser.add_argument("--coll", default="allreduce",
                        choices=("allreduce", "broadcast", "reduce", "allgather",
                                 "reduce_scatter", "alltoall"),
                        help="the collective to time (default allreduce)")
    parser.add_argument("--alltoall", dest="coll", action="store_const", const="alltoall",
                        help="the same as --coll alltoall")
    parser.add_argument("--nonblocking", action="store_true",
                        help="each call with async_op=True, waited for at once "
                             "(xcoll-perf -z 2)")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds before every rank is killed")
    argv = sys.argv[1:]
    args = parser.parse_args(argv)
    if "RANK" in os.environ:
        return run_rank(args)
    return launch(args, argv)


if __name__ == "__main__":
    sys.exit(main())
