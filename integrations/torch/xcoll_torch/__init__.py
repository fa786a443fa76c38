"""xcoll_torch: the torch.distributed backend "xcoll" (PyTorch 2.x).

Importing it registers the backend for the devices cpu and cuda::

    import torch.distributed as dist
    import xcoll_torch
    dist.init_process_group("xcoll")                  # or "cpu:xcoll,cuda:xcoll"

XCOLL_BACKEND picks the engine underneath (tcp, ucx, nccl_like); see
docs/torch.md.
"""
import datetime

import torch
import torch.distributed as dist

from ._C import BackendXcoll, xcoll_version  # noqa: F401  (loads libxcoll)
from . import _C

__all__ = ["BackendXcoll", "create_backend", "transport", "xcoll_version"]


def create_backend(dist_options, backend_options=None):
    """The creator torch calls for each group (register_backend's
    extended_api form): dist_options is torch's _DistributedBackendOptions
    (store, group_rank, group_size, timeout, group_id); backend_options the
    pg_options given to init_process_group or new_group, if any (a
    Backend.Options: its timeout wins)."""
    timeout = dist_options.timeout
    if backend_options is not None and getattr(backend_options, "_timeout", None):
        timeout = backend_options._timeout
    if not isinstance(timeout, datetime.timedelta):
        timeout = datetime.timedelta(seconds=float(timeout))
    return _C.create_backend(dist_options.store, dist_options.group_rank,
                             dist_options.group_size, timeout,
                             dist_options.group_id or "")


def transport(group=None, device="cpu"):
    """The xcoll engine under group's backend for device: tcp, ucx or
    nccl_like."""
    group = group or dist.group.WORLD
    return group._get_backend(torch.device(device)).transport


if not hasattr(dist.Backend, "XCOLL"):
    dist.Backend.register_backend("xcoll", create_backend, extended_api=True,
                                  devices=["cpu", "cuda"])
