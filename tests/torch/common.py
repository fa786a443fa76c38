"""Shared by the torch tests: start gloo as the default group and an xcoll
group over the same ranks, in one process per rank (run under xcollrun)."""
import datetime
import os
import sys

import torch
import torch.distributed as dist

import xcoll_torch  # registers the "xcoll" backend


def init_groups():
    """Returns (gloo group, xcoll group, rank, world size)."""
    timeout = datetime.timedelta(seconds=60)
    dist.init_process_group("gloo", timeout=timeout)
    xcoll = dist.new_group(backend="xcoll", timeout=timeout)
    want = os.environ.get("XCOLL_BACKEND", "tcp")
    got = xcoll_torch.transport(xcoll)
    if got != want:
        fail(f"the xcoll group runs on {got}, not {want}")
    return dist.group.WORLD, xcoll, dist.get_rank(), dist.get_world_size()


def finish(message):
    """Prints message and ends the process with status 0 without finalizing
    the interpreter."""
    print(message, flush=True)
    sys.stderr.flush()
    # torch's gloo worker threads may drop the last reference to a finished
    # Work while the interpreter finalizes; the GIL acquire in its destructor
    # then aborts the process (std::terminate; see pytorch/pytorch PR 179291).
    # Leave without finalizing once everything is printed.
    os._exit(0)


def fail(message):
    print(f"FAIL rank {os.environ.get('RANK')}: {message}", file=sys.stderr,
          flush=True)
    sys.exit(1)


def check_close(name, got, want, rtol=1e-6):
    got, want = got.double(), want.double()
    scale = want.abs().max().item() or 1.0
    error = (got - want).abs().max().item() / scale
    if error > rtol:
        fail(f"{name}: xcoll and gloo differ by {error:.3g} (relative), "
             f"more than {rtol:g}\n xcoll {got.flatten()[:8]}\n gloo  "
             f"{want.flatten()[:8]}")
