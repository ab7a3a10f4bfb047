"""braid as a torch.distributed backend.

    import braid_torch                       # registers the backend "braid"
    torch.distributed.init_process_group("braid", init_method=..., rank=r, world_size=n)

Any init_method works (tcp://, env://, file://): the ranks find each other through the process
group's store. CPU tensors; and CUDA tensors where braid_torch was built against a torch with CUDA
(`braid_torch.cuda_tensors`): a call on them is queued on the current CUDA stream, as the "nccl"
backend's are, and the communicator's device is the one current when the group was made (call
torch.cuda.set_device first) or BRAID_CUDA_DEVICE.
"""
import atexit
import sys

import torch
import torch.distributed as dist  # registers c10d's classes, which the extension builds on

from . import _C

ProcessGroupBraid = _C.ProcessGroupBraid
create_process_group = _C.create_process_group
braid_version = _C.braid_version
cuda_tensors = _C.cuda_tensors
# use_shared_memory(enabled=True, min_bytes=1 MiB): CPU tensors allocated from then on (of at least
# min_bytes) come from braidMemAlloc, where braid's collectives run in place when every rank is on
# one host. Call it before building the model and DDP (its buckets are allocated then). The memory
# is shared with a child forked later (a DataLoader worker): such a child sees the parent's tensors
# change, as with Tensor.share_memory_().
use_shared_memory = _C.use_shared_memory
uses_shared_memory = _C.uses_shared_memory

__all__ = [
    "ProcessGroupBraid", "create_process_group", "braid_version", "cuda_tensors", "use_shared_memory",
    "uses_shared_memory"
]


def _register():
    if "BRAID" in dist.Backend._plugins:  # imported twice under different names: already there
        return
    if _C.torch_version_major >= 2:
        # 2.x asks which devices a plugin serves (torch then routes only those tensors to it):
        # braid serves CPU tensors, and CUDA ones when built for them. The first 2.x releases may
        # not have the argument.
        devices = ["cpu", "cuda"] if cuda_tensors else ["cpu"]
        try:
            dist.Backend.register_backend("braid", create_process_group, devices=devices)
            return
        except TypeError:
            pass
    dist.Backend.register_backend("braid", create_process_group)


_register()

# At interpreter exit, end braid's communicators before Python tears down the objects holding them:
# a rank that leaves with an operation pending (an irecv never matched, a collective abandoned by
# an exception) aborts it, and its peers get an error naming it at once instead of waiting for
# BRAID_TIMEOUT. A program that ends with an uncaught exception aborts them all: its peers may be
# waiting in a call it will never make (a destroy would have rank 0 wait for them to leave).
# Registered after torch.distributed's import, so it runs before torch's handlers.
_crashed = False
_previous_excepthook = sys.excepthook


def _excepthook(kind, value, traceback):
    global _crashed
    # An interactive session goes on after an uncaught exception: nothing ends there.
    if not hasattr(sys, "ps1") and not sys.flags.interactive:
        _crashed = True
    _previous_excepthook(kind, value, traceback)


def _at_exit():
    _C._end_all(abort=_crashed)


sys.excepthook = _excepthook
atexit.register(_at_exit)
