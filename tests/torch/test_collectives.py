"""Every collective of the braid backend against gloo's result, on 3 ranks (odd on purpose), in one
run: the default group is gloo (tcp:// rendezvous), braid groups come from new_group. Where gloo
lacks a dtype (bfloat16, bool) it computes on float64 copies; where it lacks a collective
(reduce_scatter, _allgather_base) the reference is built from gloo's all_reduce / all_gather.
Inputs are small integers, so every dtype holds every result exactly (AVG aside).
Also: non-contiguous tensors, the Work API (wait with a timeout, futures), a subgroup, and bad input.
"""
import sys
import time
from datetime import timedelta

import harness
import torch
import torch.distributed as dist

WORLD = 3
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
DTYPES = FLOATS + [torch.int8, torch.uint8, torch.int32, torch.int64]
OPS = {name: getattr(dist.ReduceOp, name) for name in ("SUM", "PRODUCT", "MIN", "MAX")}
RTOL = {torch.float16: 1e-3, torch.bfloat16: 1e-2, torch.float32: 1e-6, torch.float64: 1e-12}


class Up:
    """A dtype gloo lacks: cases compute the same values as float64 on gloo."""

    def __init__(self, dtype):
        self.dtype = dtype


def data(rank, n, dtype, salt=0):
    """Values 1..4 (products of 3 ranks stay exact in every dtype); 0/1 for bool."""
    if isinstance(dtype, Up):
        return data(rank, n, dtype.dtype, salt).double()
    x = (torch.arange(n) * 7 + rank * 3 + salt) % 4 + 1
    return (x % 3 == 0) if dtype == torch.bool else x.to(dtype)


def zeros(shape, dtype):
    return torch.zeros(shape, dtype=torch.float64 if isinstance(dtype, Up) else dtype)


def same(got, want, what):
    assert got.dtype == want.dtype and got.shape == want.shape, f"{what}: {got.dtype}{tuple(got.shape)} vs {want.dtype}{tuple(want.shape)}"
    if got.is_floating_point():
        ok = torch.allclose(got.double(), want.double(), rtol=RTOL[got.dtype], atol=0)
    else:
        ok = torch.equal(got, want)
    assert ok, f"{what}: braid {got.tolist()[:12]} vs reference {want.tolist()[:12]}"


def on_gloo(gloo, dtype, case):
    """case(group, dtype) -> list of tensors, on gloo; float64 when gloo lacks the dtype."""
    if dtype in (torch.bfloat16, torch.bool):
        return [t != 0 if dtype == torch.bool else t.to(dtype) for t in case(gloo, Up(dtype))]
    return case(gloo, dtype)


def check(braid, gloo, dtype, case, what):
    got = case(braid, dtype)
    want = on_gloo(gloo, dtype, case)
    for i, (g, w) in enumerate(zip(got, want)):
        same(g, w, f"{what} [{dtype}] output {i}")


def reductions(rank, braid, gloo):
    for dtype in DTYPES + [torch.bool]:
        for name, op in OPS.items():
            def case(g, dt, op=op):
                t = data(rank, 37, dt)
                dist.all_reduce(t, op=op, group=g)
                return [t]
            check(braid, gloo, dtype, case, f"all_reduce {name}")
        def case(g, dt):  # reduce to rank 2: compared on the root only
            t = data(rank, 37, dt)
            dist.reduce(t, dst=2, op=dist.ReduceOp.MAX, group=g)
            return [t] if rank == 2 else []
        check(braid, gloo, dtype, case, "reduce")
    # AVG: gloo has none; SUM / WORLD on gloo, integers truncated toward zero as braid documents.
    for dtype in DTYPES:
        t = data(rank, 37, dtype)
        dist.all_reduce(t, op=dist.ReduceOp.AVG, group=braid)
        s = data(rank, 37, torch.float64)
        dist.all_reduce(s, group=gloo)
        want = (s / WORLD).to(dtype) if dtype in FLOATS else torch.div(s, WORLD, rounding_mode="trunc").to(dtype)
        same(t, want, f"all_reduce AVG [{dtype}]")
    # torch sends complex SUM as float pairs (view_as_real).
    c = torch.complex(data(rank, 8, torch.float32), -data(rank, 8, torch.float32, 1))
    want = c.clone()
    dist.all_reduce(c, group=braid)
    dist.all_reduce(want, group=gloo)
    assert torch.equal(c, want), "complex64 all_reduce"
    # Large enough to be pipelined in chunks; a non-contiguous tensor (staged and copied back).
    big = data(rank, 300_001, torch.float32)
    ref = big.clone()
    dist.all_reduce(big, group=braid)
    dist.all_reduce(ref, group=gloo)
    same(big, ref, "all_reduce 300001 floats")
    cols = torch.zeros(41, 3)
    cols[:, 1] = data(rank, 41, torch.float32)
    dist.all_reduce(cols[:, 1], group=braid)
    ref = data(rank, 41, torch.float32)
    dist.all_reduce(ref, group=gloo)
    same(cols[:, 1], ref, "all_reduce of a non-contiguous column")
    assert torch.count_nonzero(cols[:, 0]) == 0 and torch.count_nonzero(cols[:, 2]) == 0, "neighbour columns touched"
    for dtype in [torch.float32, torch.int64]:
        def case(g, dt):
            ts = [data(rank, 5, dt), data(rank, 9, dt, 1), data(rank, 1, dt, 2)]
            dist.all_reduce_coalesced(ts, group=g)
            return ts
        check(braid, gloo, dtype, case, "all_reduce_coalesced")


def movement(rank, braid, gloo):
    for dtype in DTYPES + [torch.bool]:
        def bcast(g, dt):
            t = data(rank, 23, dt)
            dist.broadcast(t, src=1, group=g)
            return [t]
        check(braid, gloo, dtype, bcast, "broadcast")

        def gather(g, dt):
            out = [zeros((2, 5), dt) for _ in range(WORLD)]
            dist.all_gather(out, data(rank, 10, dt).view(2, 5), group=g)
            return out
        check(braid, gloo, dtype, gather, "all_gather")
        out = torch.zeros(WORLD * 10, dtype=dtype)
        dist.all_gather_into_tensor(out, data(rank, 10, dtype), group=braid)
        same(out, torch.cat(on_gloo(gloo, dtype, gather)).view(-1), f"all_gather_into_tensor [{dtype}]")

        def a2a(g, dt):
            out = zeros(WORLD * 4, dt)
            dist.all_to_all_single(out, data(rank, WORLD * 4, dt), group=g)
            return [out]
        check(braid, gloo, dtype, a2a, "all_to_all_single")

        # Uneven: rank r sends r + p + 1 rows of 3 elements to rank p.
        def a2av(g, dt):
            sends = [rank + p + 1 for p in range(WORLD)]
            out = zeros((sum(sends), 3), dt)
            inp = data(rank, sum(sends) * 3, dt).view(-1, 3)
            dist.all_to_all_single(out, inp, output_split_sizes=sends, input_split_sizes=sends, group=g)
            return [out]
        check(braid, gloo, dtype, a2av, "all_to_all_single uneven")
        outs = [torch.zeros(rank + p + 1, 3, dtype=dtype) for p in range(WORLD)]
        flat = data(rank, sum(rank + p + 1 for p in range(WORLD)) * 3, dtype).view(-1, 3)
        dist.all_to_all(outs, list(flat.split([rank + p + 1 for p in range(WORLD)])), group=braid)
        same(torch.cat(outs), on_gloo(gloo, dtype, a2av)[0], f"all_to_all list [{dtype}]")

    for dtype in [torch.float32, torch.int32, torch.bfloat16]:
        # reduce_scatter = block `rank` of an all_reduce of the concatenated inputs.
        ins = [data(rank, 6, dtype, p) for p in range(WORLD)]
        ref = on_gloo(gloo, dtype, lambda g, dt: _all_reduced(torch.cat([data(rank, 6, dt, p) for p in range(WORLD)]), g))
        out = torch.zeros(6, dtype=dtype)
        dist.reduce_scatter(out, ins, group=braid)
        same(out, ref[0][rank * 6:(rank + 1) * 6], f"reduce_scatter [{dtype}]")
        out = torch.zeros(6, dtype=dtype)
        dist.reduce_scatter_tensor(out, torch.cat(ins), group=braid)
        same(out, ref[0][rank * 6:(rank + 1) * 6], f"reduce_scatter_tensor [{dtype}]")


def _all_reduced(t, g):
    dist.all_reduce(t, group=g)
    return [t]


def point_to_point(rank, braid, gloo):
    # A ring of nonblocking sends and receives; then rank 0 -> rank 2 blocking (recv names its source).
    right, left = (rank + 1) % WORLD, (rank - 1) % WORLD
    got = torch.zeros(1000, dtype=torch.int64)
    reqs = [dist.isend(torch.arange(1000) + 10_000 * rank, right, group=braid), dist.irecv(got, left, group=braid)]
    for r in reqs:
        r.wait()
    same(got, torch.arange(1000) + 10_000 * left, "isend/irecv ring")
    if rank == 0:
        dist.send(torch.full((7,), 3.5), dst=2, group=braid)
    elif rank == 2:
        t = torch.zeros(7)
        dist.recv(t, src=0, group=braid)
        same(t, torch.full((7,), 3.5), "send/recv 0 -> 2")
    dist.barrier(group=braid)


def work_api(rank, braid, gloo):
    t = data(rank, 100, torch.float32)
    work = dist.all_reduce(t, group=braid, async_op=True)
    assert work.wait(timeout=timedelta(seconds=60)) is True
    assert work.is_completed()
    fut = work.get_future()
    assert fut.done() and torch.equal(fut.value()[0], t), "the future holds the result tensor"
    # A future taken while the operation cannot finish yet (rank 2 joins it only after a gloo
    # barrier) is returned at once, unfinished, and marked later by itself, with the callback chained
    # by then() run at that point; nobody calls wait (DDP overlaps its allreduces with backward so).
    late = torch.full((5,), float(rank + 1))
    if rank != 2:
        fut = dist.all_reduce(late, group=braid, async_op=True).get_future()
        assert not fut.done(), "the future was done before rank 2 joined the all_reduce"
        chained = fut.then(lambda f: f.value()[0] * 2)
        dist.barrier(group=gloo)  # lets rank 2 join
        end = time.monotonic() + 60
        while not chained.done() and time.monotonic() < end:
            time.sleep(0.001)
        assert chained.done(), "the future was never marked (nobody waited on it)"
        same(fut.value()[0], torch.full((5,), 6.0), "future of a late all_reduce")
        same(chained.value(), torch.full((5,), 12.0), "then() callback of a late all_reduce")
    else:
        dist.barrier(group=gloo)
        dist.all_reduce(late, group=braid)
    same(late, torch.full((5,), 6.0), "late all_reduce")
    # A receive whose sender waits for us: wait(timeout) must give up (the message says so), and the
    # same Work completes once the data came.
    if rank == 0:
        buf = torch.zeros(3)
        work = dist.irecv(buf, src=1, group=braid)
        try:
            work.wait(timeout=timedelta(milliseconds=300))
            raise AssertionError("wait(timeout) returned although the sender had not sent yet")
        except RuntimeError as exc:
            assert "did not complete within 300 ms" in str(exc), str(exc)
        assert not work.is_completed()
        dist.barrier(group=gloo)  # releases rank 1
        work.wait()
        same(buf, torch.tensor([1.0, 2.0, 3.0]), "irecv after a timed-out wait")
    else:
        dist.barrier(group=gloo)
        if rank == 1:
            dist.send(torch.tensor([1.0, 2.0, 3.0]), dst=0, group=braid)


def subgroup(rank, braid, gloo):
    sub = dist.new_group([0, 2], backend="braid")  # every rank calls new_group; rank 1 is not in it
    if rank == 1:
        assert sub == dist.GroupMember.NON_GROUP_MEMBER
        return
    assert dist.get_world_size(sub) == 2
    t = torch.full((5,), float(rank + 1))
    dist.all_reduce(t, group=sub)
    same(t, torch.full((5,), 4.0), "all_reduce in the subgroup {0, 2}")


def bad_input(rank, braid, gloo):
    def refused(fn, words, what):
        try:
            fn()
        except RuntimeError as exc:
            msg = str(exc)
            assert all(w in msg for w in words), f"{what}: message {msg!r} lacks {words}"
            return
        raise AssertionError(f"{what}: accepted")

    refused(lambda: dist.all_reduce(torch.zeros(3, dtype=torch.int16), group=braid), ["braid", "dtype"], "int16")
    refused(lambda: dist.all_reduce(torch.ones(3), op=dist.ReduceOp.BXOR, group=braid), ["BXOR", "not supported"], "BXOR")
    refused(lambda: dist.all_reduce(torch.ones(3, dtype=torch.bool), op=dist.ReduceOp.AVG, group=braid), ["AVG"], "bool AVG")
    # (CUDA tensors get "braid takes CPU tensors only"; this torch has no CUDA to show it.)
    refused(lambda: dist.broadcast(torch.ones(3).to_sparse(), 0, group=braid), ["only dense tensors"], "sparse")
    refused(lambda: dist.send(torch.ones(3), dst=(rank + 1) % WORLD, group=braid, tag=-1), ["tag", "negative"], "tag -1")
    outs = [torch.full((4,), -1.0) for _ in range(WORLD - 1)]  # one tensor short
    refused(lambda: dist.all_gather(outs, torch.ones(4), group=braid), ["output list has 2 tensors"], "short list")
    assert all(torch.equal(o, torch.full((4,), -1.0)) for o in outs), "a refused all_gather wrote its outputs"
    refused(lambda: dist.all_to_all_single(torch.zeros(6), torch.zeros(6), [1, 2, 4], [2, 2, 2], group=braid),
            ["split sizes add up to 7"], "bad splits")
    # The group still works after the refusals (nothing was issued).
    t = torch.ones(2)
    dist.all_reduce(t, group=braid)
    same(t, torch.full((2,), float(WORLD)), "all_reduce after refused calls")


def rank_main(rank, world, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    gloo = dist.group.WORLD
    braid = dist.new_group(backend="braid")
    assert dist.get_backend(braid) == "braid"
    for part in (reductions, movement, point_to_point, work_api, subgroup, bad_input):
        part(rank, braid, gloo)
    dist.destroy_process_group()


if __name__ == "__main__":
    res = harness.run_ranks(rank_main, WORLD, args=(harness.free_port(),), deadline_s=150)
    sys.exit(1 if harness.check_all(res, f"collectives on {WORLD} ranks, braid vs gloo") else 0)
