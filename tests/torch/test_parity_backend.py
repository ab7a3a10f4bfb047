"""What torch code that gates on a backend's name and capabilities finds on "braid", against gloo in
the same run, on 2 and 3 ranks: the backend's name everywhere torch reports it, the devices it was
registered for (torch 2.x), Work.get_future (DDP comm hooks: torch's own allreduce and fp16
compression hooks and a custom one chained with then(), each trained beside gloo with the same hook),
all_reduce_coalesced, and the object collectives built on all_gather and broadcast.
"""
import sys

import harness
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP


def custom_hook(state, bucket):
    """Averages through the process group's future, then doubles and halves (a then() chain)."""
    group = state if state is not None else dist.group.WORLD
    tensor = bucket.buffer() if hasattr(bucket, "buffer") else bucket.get_tensor()
    fut = dist.all_reduce(tensor, group=group, async_op=True).get_future()
    n = dist.get_world_size(group)
    return fut.then(lambda f: f.value()[0] * 2).then(lambda f: f.value() / (2 * n))


HOOKS = {
    "allreduce_hook": default_hooks.allreduce_hook,
    "fp16_compress_hook": default_hooks.fp16_compress_hook,
    "custom then() chain": custom_hook,
}


def train(group, rank, hook):
    torch.manual_seed(7)
    net = DDP(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)),
              process_group=group, bucket_cap_mb=0.0005)
    net.register_comm_hook(group, hook)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(50 + rank)
    for _ in range(5):
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(torch.randn(6, 8, generator=gen)), torch.randn(6, 4, generator=gen)).backward()
        opt.step()
    return [p.detach().clone() for p in net.parameters()]


def rank_main(rank, world, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    gloo = dist.group.WORLD
    braid = dist.new_group(backend="braid")
    # The name, wherever torch reports it.
    assert dist.get_backend(braid) == "braid", dist.get_backend(braid)
    assert dist.Backend("braid") == "braid" and "BRAID" in dist.Backend._plugins
    name = braid.name() if hasattr(braid, "name") else braid._get_backend_name()
    assert name == "braid", name
    if int(torch.__version__.split(".")[0]) >= 2:
        capability = getattr(dist.Backend, "backend_capability", {}).get("braid")
        assert capability in (None, ["cpu"]), f"registered for {capability}, braid serves cpu"

    # get_future: DDP with comm hooks trains as on gloo.
    for hook_name, hook in HOOKS.items():
        on_braid, on_gloo = train(braid, rank, hook), train(gloo, rank, hook)
        for i, (b, g) in enumerate(zip(on_braid, on_gloo)):
            tol = 1e-2 if "fp16" in hook_name else 1e-5
            assert torch.allclose(b, g, rtol=tol, atol=tol), f"{hook_name}: parameter {i} differs by {(b - g).abs().max()}"

    # all_reduce_coalesced, as gloo.
    def coalesced(group):
        ts = [torch.arange(5, dtype=torch.float32) + rank, torch.full((3, 2), float(rank))]
        dist.all_reduce_coalesced(ts, group=group)
        return ts
    for b, g in zip(coalesced(braid), coalesced(gloo)):
        assert torch.equal(b, g), f"all_reduce_coalesced: {b} vs gloo {g}"

    # Object collectives (pickled objects of different sizes per rank).
    objs = {"rank": rank, "payload": list(range(rank * 5)), "name": "x" * (3 + rank)}
    got_b, got_g = [None] * world, [None] * world
    dist.all_gather_object(got_b, objs, group=braid)
    dist.all_gather_object(got_g, objs, group=gloo)
    assert got_b == got_g and got_b[world - 1]["rank"] == world - 1, got_b
    for src in range(world):
        lst_b = [f"from {rank}", {"r": rank}] if rank == src else [None, None]
        lst_g = list(lst_b)
        dist.broadcast_object_list(lst_b, src=src, group=braid)
        dist.broadcast_object_list(lst_g, src=src, group=gloo)
        assert lst_b == lst_g == [f"from {src}", {"r": src}], (lst_b, lst_g)
    dist.destroy_process_group()


if __name__ == "__main__":
    failed = 0
    for world in (2, 3):
        res = harness.run_ranks(rank_main, world, args=(harness.free_port(),), deadline_s=120)
        failed += harness.check_all(res, f"backend identity and capabilities on {world} ranks, braid vs gloo")
    sys.exit(1 if failed else 0)
