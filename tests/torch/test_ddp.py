"""DistributedDataParallel on braid trains like DDP on gloo: 20 SGD steps of a small MLP on 2 and on
4 ranks, same seeds, same per-rank data; the parameters must agree to float32 tolerance (the two
backends may sum gradients in different orders), and stay equal across ranks.

The default group is braid (env:// rendezvous: MASTER_ADDR/MASTER_PORT), the gloo group comes from
new_group. Small buckets make DDP issue several allreduces per step.
"""
import sys

import harness
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 20


def model():
    torch.manual_seed(1234)  # the same initial parameters everywhere (DDP broadcasts rank 0's anyway)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 8))


def train(group, rank):
    net = DDP(model(), process_group=group, bucket_cap_mb=0.001)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(100 + rank)  # each rank its own data, the same for both backends
    for _ in range(STEPS):
        x = torch.randn(12, 16, generator=gen)
        y = torch.randn(12, 8, generator=gen)
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in net.parameters()]


def rank_main(rank, world):
    dist.init_process_group("braid", init_method="env://", rank=rank, world_size=world)
    assert dist.get_backend() == "braid"
    gloo = dist.new_group(backend="gloo")
    on_braid = train(dist.group.WORLD, rank)
    on_gloo = train(gloo, rank)
    start = [p.detach() for p in model().parameters()]
    for i, (b, g, s) in enumerate(zip(on_braid, on_gloo, start)):
        assert not torch.equal(b, s), f"parameter {i} did not change: nothing was trained"
        assert torch.allclose(b, g, rtol=1e-5, atol=1e-6), f"parameter {i}: braid and gloo differ by {(b - g).abs().max()}"
    # Every rank holds the same model (checked over gloo, to depend on braid for the training only).
    flat = torch.cat([p.view(-1) for p in on_braid])
    every = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(every, flat, group=gloo)
    assert all(torch.equal(e, flat) for e in every), "ranks hold different parameters after braid's allreduces"
    dist.destroy_process_group()


if __name__ == "__main__":
    failed = 0
    for world in (2, 4):
        env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(harness.free_port())}
        res = harness.run_ranks(rank_main, world, env=env, deadline_s=120)
        failed += harness.check_all(res, f"DDP {STEPS} steps on {world} ranks, braid vs gloo")
    sys.exit(1 if failed else 0)
