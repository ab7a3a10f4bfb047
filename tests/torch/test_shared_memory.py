"""braid_torch.use_shared_memory: CPU tensors from braidMemAlloc, on which braid's collectives run in
place on one host. On 2 and 3 ranks: a big tensor lands in braid's shared memory and a small one
does not; all_reduce, broadcast, all_gather and reduce_scatter on such tensors give gloo's results
(default group gloo, the braid group from new_group, same inputs); DDP on the braid group trains to
the parameters gloo's DDP reaches; turned off, new tensors are ordinary memory again; a freed tensor's
shared memory is unmapped.
"""
import sys

import braid_torch
import harness
import torch
import torch.distributed as dist


def braid_ranges():
    """[start, end) of this process's braidMemAlloc mappings (memfds named braid-mem)."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            if "braid-mem" in line:
                lo, hi = line.split()[0].split("-")
                out.append((int(lo, 16), int(hi, 16)))
    return out


def in_braid_memory(t):
    p = t.data_ptr()
    return any(lo <= p < hi for lo, hi in braid_ranges())


def train(group, seed, steps=3):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(600, 600), torch.nn.ReLU(), torch.nn.Linear(600, 10))
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=group, bucket_cap_mb=1)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(seed + dist.get_rank())
    for _ in range(steps):
        opt.zero_grad()
        ddp(torch.randn(16, 600, generator=gen)).square().mean().backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def rank_main(rank, world, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    gloo = dist.group.WORLD
    braid = dist.new_group(backend="braid")
    braid_torch.use_shared_memory(True, min_bytes=1 << 20)
    assert braid_torch.uses_shared_memory()
    big, small = torch.empty(1 << 20), torch.empty(256)
    assert in_braid_memory(big), "a 4 MiB tensor is not in braidMemAlloc memory"
    assert not in_braid_memory(small), "a 1 KiB tensor is in braidMemAlloc memory (under min_bytes)"
    checked = 0
    for dtype in (torch.float32, torch.float64, torch.int64, torch.float16):  # gloo has no bfloat16 sum
        for n in (1 << 19, (1 << 20) + 17):  # 1 MiB and more in every dtype
            base = (torch.arange(n, dtype=torch.float64) % 97 + rank).to(dtype)
            got, want = base.clone(), base.clone()
            assert in_braid_memory(got)
            dist.all_reduce(got, group=braid)
            dist.all_reduce(want, group=gloo)
            assert torch.equal(got, want), f"all_reduce {dtype} {n}: differs from gloo"
            got, want = base.clone(), base.clone()
            dist.broadcast(got, src=world - 1, group=braid)
            dist.broadcast(want, src=world - 1, group=gloo)
            assert torch.equal(got, want), f"broadcast {dtype} {n}: differs from gloo"
            outs = [torch.empty_like(base) for _ in range(world)]
            refs = [torch.empty_like(base) for _ in range(world)]
            dist.all_gather(outs, base, group=braid)
            dist.all_gather(refs, base, group=gloo)
            assert all(torch.equal(a, b) for a, b in zip(outs, refs)), f"all_gather {dtype} {n}: differs from gloo"
            checked += 3
    # reduce_scatter: gloo has none; the sum of the blocks is known.
    blocks = [torch.full((1 << 18,), float(rank + b)) for b in range(world)]
    out = torch.empty(1 << 18)
    dist.reduce_scatter(out, blocks, group=braid)
    want = float(sum(r + rank for r in range(world)))
    assert torch.equal(out, torch.full((1 << 18,), want)), "reduce_scatter: wrong sum"
    # DDP: the same model, seed and inputs through braid (buckets in shared memory) and gloo.
    got = train(braid, seed=7)
    braid_torch.use_shared_memory(False)
    want = train(gloo, seed=7)
    for i, (a, b) in enumerate(zip(got, want)):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6), f"DDP parameter {i} differs from gloo's: {float((a - b).abs().max())}"
    # Off: new tensors are ordinary memory; a freed shared tensor's mapping goes away.
    assert not braid_torch.uses_shared_memory()
    assert not in_braid_memory(torch.empty(1 << 20)), "off, a 4 MiB tensor is still braidMemAlloc memory"
    before = len(braid_ranges())
    del big, got
    assert len(braid_ranges()) < before, "freeing shared tensors unmapped nothing"
    dist.destroy_process_group()
    return checked


if __name__ == "__main__":
    failed = 0
    for world in (2, 3):
        res = harness.run_ranks(rank_main, world, args=(harness.free_port(),), deadline_s=120)
        failed += harness.check_all(res, f"tensors in braid's shared memory on {world} ranks, braid vs gloo")
    sys.exit(1 if failed else 0)
