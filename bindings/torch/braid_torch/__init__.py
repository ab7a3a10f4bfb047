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
        # 2.x asks which devices a plugin serves (torch then routes only those tensors to it):
        # braid serves CPU tensors. The first 2.x releases may not have the argument.
        try:
            dist.Backend.register_backend("braid", create_process_group, devices=["cpu"])
            return
        except TypeError:
            pass
    dist.Backend.register_backend("braid", create_process_group)


_register()
