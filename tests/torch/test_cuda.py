"""braid_torch on CUDA tensors ([gpu]): every collective on 2 ranks sharing the first GPU, checked
against a float64 reference computed on the host; stream ordering (kernels queued before and after a
collective on a side stream, no host synchronization between); async work, wait() and futures;
point-to-point; the refusals (any source, tags, CPU and CUDA tensors in one call); destroy with a
call still queued on its stream; DDP on CUDA against the same model trained on the CPU over gloo.

Skips (exit 77) with the reason where braid_torch was built without CUDA (a torch without it, or a
braid without nvcc) or where no GPU is visible. The parent never touches CUDA: the ranks are forked
from it, and a CUDA context made before fork is unusable in the children.
"""
import sys

import braid_torch
import harness
import torch
import torch.distributed as dist

WORLD = 2
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64]


def probe(rank, world):
    return torch.cuda.is_available(), torch.cuda.device_count() if torch.cuda.is_available() else 0


def data(rank, n, dtype, device, salt=0):
    """Values exact in every dtype (small integers), different per rank and element."""
    v = (torch.arange(n, dtype=torch.float64) * (rank + 1 + salt)) % 7 - 3
    return v.to(dtype).to(device)


def close(got, want, dtype, what):
    want = want.to(torch.float64)
    got = got.double().cpu()
    tol = 1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-9
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    err = (got - want).abs().max().item() if got.numel() else 0.0
    assert err <= tol * max(1.0, want.abs().max().item() if want.numel() else 1.0), f"{what}: off by {err}"


def collectives(rank, world, dev):
    for dtype in DTYPES:
        for n in (1, 1000, 1 << 20):
            name = f"{dtype} x {n}"
            t = data(rank, n, dtype, dev)
            dist.all_reduce(t)
            ref = sum(data(r, n, torch.float64, "cpu") for r in range(world))
            close(t, ref, dtype, "all_reduce " + name)

            t = data(rank, n, dtype, dev)
            dist.broadcast(t, src=1)
            close(t, data(1, n, torch.float64, "cpu"), dtype, "broadcast " + name)

            t = data(rank, n, dtype, dev)
            dist.reduce(t, dst=0)
            if rank == 0:
                close(t, ref, dtype, "reduce " + name)

            outs = [torch.empty(n, dtype=dtype, device=dev) for _ in range(world)]
            dist.all_gather(outs, data(rank, n, dtype, dev))
            for r in range(world):
                close(outs[r], data(r, n, torch.float64, "cpu"), dtype, f"all_gather {name} block {r}")

            flat = torch.empty(world * n, dtype=dtype, device=dev)
            dist._all_gather_base(flat, data(rank, n, dtype, dev))
            close(flat, torch.cat([data(r, n, torch.float64, "cpu") for r in range(world)]), dtype,
                  "_all_gather_base " + name)

            out = torch.empty(n, dtype=dtype, device=dev)
            dist.reduce_scatter(out, [data(rank, n, dtype, dev, salt=b) for b in range(world)])
            close(out, sum(data(r, n, torch.float64, "cpu", salt=rank) for r in range(world)), dtype,
                  "reduce_scatter " + name)

            src = torch.cat([data(rank, n, dtype, dev, salt=b) for b in range(world)])
            out = torch.empty_like(src)
            dist.all_to_all_single(out, src)
            close(out, torch.cat([data(r, n, torch.float64, "cpu", salt=rank) for r in range(world)]), dtype,
                  "all_to_all_single " + name)


def stream_order(rank, world, dev):
    """A side stream: the fill before, the all_reduce, the multiply after, then one sync at the end."""
    side = torch.cuda.Stream(device=dev)
    n = 1 << 22
    with torch.cuda.stream(side):
        for i in range(5):
            x = torch.full((n,), float(rank + 1 + i), device=dev)
            x.mul_(2)  # queued before the collective: it must see the doubled values
            dist.all_reduce(x)
            y = x * 3  # queued after: it must see the sum
            torch.cuda._sleep(1000)  # keeps the stream busy, so a call that did not wait would be seen
            z = y + 0
            side.synchronize()
            want = 3 * 2 * sum(r + 1 + i for r in range(world))
            assert torch.all(z == want).item(), f"stream order, round {i}: {z[:4].tolist()} instead of {want}"


def async_work(rank, world, dev):
    t = data(rank, 4096, torch.float32, dev)
    work = dist.all_reduce(t, async_op=True)
    work.wait()  # the current stream waits; t is then safe to use on it
    ref = sum(data(r, 4096, torch.float64, "cpu") for r in range(world))
    close(t * 1, ref, torch.float32, "all_reduce async + wait")
    torch.cuda.synchronize()
    assert work.is_completed(), "the Work is not completed after its stream ran"

    t = data(rank, 4096, torch.float32, dev)
    fut = dist.all_reduce(t, async_op=True).get_future()
    doubled = fut.then(lambda f: f.value()[0] * 2).wait()
    close(doubled, 2 * ref, torch.float32, "future.then")


def point_to_point(rank, world, dev):
    n = 1 << 18
    if rank == 0:
        dist.send(data(0, n, torch.float32, dev), dst=1)
        got = torch.empty(n, device=dev)
        dist.recv(got, src=1)
        close(got, data(1, n, torch.float64, "cpu"), torch.float32, "recv on rank 0")
    else:
        got = torch.empty(n, device=dev)
        dist.recv(got, src=0)
        close(got, data(0, n, torch.float64, "cpu"), torch.float32, "recv on rank 1")
        dist.send(data(1, n, torch.float32, dev), dst=0)


def refusals(rank, world, dev):
    def refused(fn, words, what):
        try:
            fn()
        except RuntimeError as e:
            # torch may refuse a mix of devices itself before braid sees the call: "device" then.
            assert any(w in str(e) for w in words), f"{what}: the error says none of {words}: {e}"
            return
        raise AssertionError(f"{what} was accepted")

    t = torch.zeros(4, device=dev)
    refused(lambda: dist.recv(t), ["any rank"], "a CUDA receive from any source")
    refused(lambda: dist.send(t, dst=1 - rank, tag=3), ["tag 3"], "a CUDA send with a tag")
    refused(lambda: dist.all_to_all_single(torch.zeros(4), t), ["one CUDA device", "device"], "CPU and CUDA in one call")
    # Nothing was sent by the refused calls: the next collective still matches on both ranks.
    x = torch.ones(8, device=dev)
    dist.all_reduce(x)
    assert torch.all(x == world).item(), "an all_reduce after the refusals went wrong"


def end_in_flight(rank, world, dev):
    """destroy_process_group while an all_reduce is still queued behind a busy stream: the group ends
    as an ordinary destroy (the call finishes first), not as an abort that would fail it."""
    x = torch.full((1 << 20,), float(rank + 1), device=dev)
    torch.cuda._sleep(200_000_000)  # about 0.1 s of GPU time ahead of the collective
    dist.all_reduce(x)
    dist.destroy_process_group()
    torch.cuda.synchronize()
    want = sum(r + 1 for r in range(world))
    assert torch.all(x == want).item(), f"the all_reduce in flight at destroy gave {x[:4].tolist()}, not {want}"


def ddp(rank, world, dev):
    from torch.nn.parallel import DistributedDataParallel as DDP

    def train(device, group):
        torch.manual_seed(7)
        net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 8)).double().to(device)
        model = DDP(net, process_group=group, bucket_cap_mb=0.001,
                    device_ids=[device.index] if device.type == "cuda" else None)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        gen = torch.Generator().manual_seed(50 + rank)
        for _ in range(20):
            x = torch.randn(16, 32, generator=gen, dtype=torch.float64).to(device)
            y = torch.randn(16, 8, generator=gen, dtype=torch.float64).to(device)
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        return [p.detach().cpu() for p in net.parameters()]

    gloo = dist.new_group(backend="gloo")
    on_gpu = train(dev, dist.group.WORLD)
    on_cpu = train(torch.device("cpu"), gloo)
    for i, (g, c) in enumerate(zip(on_gpu, on_cpu)):
        assert torch.allclose(g, c, rtol=1e-9, atol=1e-10), f"DDP parameter {i}: braid on CUDA and gloo differ by {(g - c).abs().max()}"


def rank_main(rank, world, steps):
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)  # before the group: braid's communicator takes the current device
    dist.init_process_group("braid", init_method="env://", rank=rank, world_size=world)
    for step in steps:
        globals()[step](rank, world, dev)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    if not braid_torch.cuda_tensors:
        print(f"SKIP: braid_torch was built for CPU tensors only (torch {torch.__version__}, CUDA "
              f"{torch.version.cuda}); a torch with CUDA and braid's CUDA build enable this test")
        sys.exit(harness.SKIP)
    seen = harness.run_ranks(probe, 1, deadline_s=60)
    ok, value = seen.get(0, (False, "no answer"))
    if not ok or not value[0] or value[1] < 1:
        print(f"SKIP: no CUDA device visible to torch ({value})")
        sys.exit(harness.SKIP)
    failed = 0
    for steps in (["collectives"], ["stream_order", "async_work", "point_to_point", "refusals", "end_in_flight"], ["ddp"]):
        env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(harness.free_port())}
        res = harness.run_ranks(rank_main, WORLD, args=(steps,), env=env, deadline_s=180)
        failed += harness.check_all(res, f"CUDA tensors, {WORLD} ranks on one GPU: {', '.join(steps)}")
    sys.exit(1 if failed else 0)
