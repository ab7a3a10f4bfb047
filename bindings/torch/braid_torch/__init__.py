"""braid as a torch.distributed backend.

    import braid_torch                       # registers the backend "braid"
    torch.distributed.init_process_group("braid", init_method=..., rank=r, world_size=n)

Any init_method works (tcp://, env://, file://): the ranks find each other through the process
group's store. CPU tensors only for now.
"""
import torch
import torch.distributed as dist  # registers c10d's classes, which the extension builds on

from . import _C

ProcessGroupBraid = _C.ProcessGroupBraid
create_process_group = _C.create_process_group
braid_version = _C.braid_version

__all__ = ["ProcessGroupBraid", "create_process_group", "braid_version"]


def _register():
    if "BRAID" in dist.Backend._plugins:  # imported twice under different names: already there
        return
    if _C.torch_version_major >= 2:
        # 2.x asks which devices a plugin serves; braid serves CPU tensors (CUDA ones would be
        # refused by braid anyway, and torch then reports the missing backend clearly).
        dist.Backend.register_backend("braid", create_process_group, devices=["cpu"])
    else:
        dist.Backend.register_backend("braid", create_process_group)


_register()
