"""gather, scatter, gather_object, scatter_object_list and all_gather_coalesced on braid against
gloo in the same processes, on 2 and 3 ranks: the default group is braid, a gloo group from
new_group runs the same call on the same inputs, and the outputs must be equal. Every dtype
braid_torch accepts (where gloo lacks one, bfloat16 and bool, gloo computes on float64 copies),
roots 0, 1 and size-1, 1-D and 2-D tensors, empty tensors in the coalesced all_gather.
"""
import sys

import harness
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import GatherOptions, ScatterOptions
from test_collectives import Up, data, on_gloo, same, zeros

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int32,
          torch.int64, torch.bool]
SHAPES = [(5,), (2, 3)]


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def roots(world):
    return sorted({0, 1, world - 1})


def gather_case(rank, world, root, shape):
    def case(g, dt):
        t = data(rank, numel(shape), dt, salt=root).view(shape)
        out = [zeros(shape, dt) for _ in range(world)] if rank == root else None
        dist.gather(t, out, dst=root, group=g)
        return out if rank == root else [t]  # off the root: the input stays as it was

    return case


def scatter_case(rank, world, root, shape):
    def case(g, dt):
        ins = [data(r, numel(shape), dt, salt=root + 1).view(shape) for r in range(world)] if rank == root else None
        out = zeros(shape, dt)
        dist.scatter(out, ins, src=root, group=g)
        return [out]

    return case


def compare(rank, braid_out, gloo_out, what):
    assert len(braid_out) == len(gloo_out), f"{what}: {len(braid_out)} outputs vs {len(gloo_out)}"
    for i, (b, w) in enumerate(zip(braid_out, gloo_out)):
        same(b, w, f"rank {rank} {what} output {i}")


def gathers(rank, world, gloo):
    for dt in DTYPES:
        for root in roots(world):
            for shape in SHAPES:
                what = f"gather {dt} root {root} shape {shape}"
                case = gather_case(rank, world, root, shape)
                compare(rank, case(None, dt), on_gloo(gloo, dt, case), what)
                case = scatter_case(rank, world, root, shape)
                compare(rank, case(None, dt), on_gloo(gloo, dt, case), f"scatter {dt} root {root} shape {shape}")
    # Nonblocking forms: the Work completes with the results in place.
    root = world - 1
    t = data(rank, 7, torch.float32)
    out = [torch.zeros(7) for _ in range(world)] if rank == root else None
    dist.gather(t, out, dst=root, async_op=True).wait()
    if rank == root:
        for r in range(world):
            same(out[r], data(r, 7, torch.float32), f"async gather block {r}")
    got = torch.zeros(4)
    ins = [torch.full((4,), float(r + 10)) for r in range(world)] if rank == root else None
    dist.scatter(got, ins, src=root, async_op=True).wait()
    same(got, torch.full((4,), float(rank + 10)), "async scatter")


def objects(rank, world, gloo):
    for root in roots(world):
        mine = {"rank": rank, "text": "x" * (rank * 7 + root), "list": list(range(rank + 1))}
        got = [None] * world if rank == root else None
        want = [None] * world if rank == root else None
        dist.gather_object(mine, got, dst=root)
        dist.gather_object(mine, want, dst=root, group=gloo)
        assert got == want, f"gather_object root {root}: braid {got} vs gloo {want}"
        if rank == root:
            assert got[world - 1]["rank"] == world - 1, f"gather_object root {root}: {got}"
        objs = [{"to": r, "pad": "y" * (3 * r + 1)} for r in range(world)] if rank == root else None
        got, want = [None], [None]
        dist.scatter_object_list(got, objs, src=root)
        dist.scatter_object_list(want, objs, src=root, group=gloo)
        assert got == want and got[0]["to"] == rank, f"scatter_object_list root {root}: braid {got} vs gloo {want}"


def coalesced(rank, world, gloo):
    # Same-dtype lists with empty tensors (against gloo's all_gather_coalesced), then mixed dtypes
    # (against gloo's all_gather of each tensor): torch 1.13's Python wrapper refuses those before
    # any backend sees them, so they go to the process group's method, which gloo also accepts.
    for dt in [torch.float32, torch.float64, torch.int32, torch.int64, torch.int8, torch.uint8, torch.float16]:
        shapes = [(3,), (0,), (2, 2), (0, 4), (1,)]

        def case(g, d, shapes=shapes):
            ins = [data(rank, numel(s), d, salt=i).view(s) for i, s in enumerate(shapes)]
            outs = [[zeros(s, d) for s in shapes] for _ in range(world)]
            dist.all_gather_coalesced(outs, ins, group=g)
            return [t for per_rank in outs for t in per_rank]

        compare(rank, case(None, dt), case(gloo, dt), f"all_gather_coalesced {dt}")
    mixed = [(torch.float32, (4,)), (torch.int64, (0,)), (torch.bfloat16, (2, 3)), (torch.bool, (5,)),
             (torch.int8, (1,))]
    ins = [data(rank, numel(s), d, salt=i).view(s) for i, (d, s) in enumerate(mixed)]
    outs = [[torch.zeros(s, dtype=d) for d, s in mixed] for _ in range(world)]
    dist.distributed_c10d._get_default_group().allgather_coalesced(outs, ins).wait()
    for i, (d, s) in enumerate(mixed):
        ref = [zeros(s, Up(d)) for _ in range(world)]
        if numel(s) > 0:  # gloo's all_gather of an empty tensor dies dividing by zero (SIGFPE)
            dist.all_gather(ref, ins[i].double(), group=gloo)
        for r in range(world):
            want = ref[r] != 0 if d == torch.bool else ref[r].to(d)
            same(outs[r][i], want, f"all_gather_coalesced mixed dtypes, tensor {i} from rank {r}")
    # Nothing but empty tensors (gloo cannot: see above): a no-op that completes.
    outs = [[torch.zeros(0), torch.zeros(0, 3)] for _ in range(world)]
    dist.all_gather_coalesced(outs, [torch.zeros(0), torch.zeros(0, 3)], async_op=True).wait()
    assert all(o[0].shape == (0,) and o[1].shape == (0, 3) for o in outs), "empty all_gather_coalesced"


def refusals(rank, world):
    def refused(fn, words, what):
        try:
            fn()
        except (RuntimeError, ValueError) as exc:
            msg = str(exc)
            assert all(w in msg for w in words), f"{what}: message {msg!r} lacks {words}"
            return
        raise AssertionError(f"{what}: accepted")

    # Refused on every rank, so nothing is left half-issued.
    pg = dist.distributed_c10d._get_default_group()
    opts = GatherOptions()
    opts.rootRank = world
    refused(lambda: pg.gather([], [torch.ones(2)], opts), ["gather", "root"], "gather root out of range")
    sopts = ScatterOptions()
    sopts.rootRank = -1
    refused(lambda: pg.scatter([torch.ones(2)], [], sopts), ["scatter", "root"], "scatter root out of range")
    refused(lambda: dist.all_gather_coalesced([[torch.zeros(2, dtype=torch.int16)]] * world,
                                              [torch.zeros(2, dtype=torch.int16)]), ["dtype"], "int16")
    t = torch.ones(2)
    dist.all_reduce(t)
    same(t, torch.full((2,), float(world)), "all_reduce after refused calls")


def rank_main(rank, world, port):
    dist.init_process_group("braid", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    assert dist.get_backend() == "braid"
    gloo = dist.new_group(backend="gloo")
    gathers(rank, world, gloo)
    objects(rank, world, gloo)
    coalesced(rank, world, gloo)
    refusals(rank, world)
    dist.destroy_process_group()


if __name__ == "__main__":
    failed = 0
    for world in (2, 3):
        res = harness.run_ranks(rank_main, world, args=(harness.free_port(),), deadline_s=150)
        failed += harness.check_all(res, f"gather/scatter/all_gather_coalesced on {world} ranks, braid vs gloo")
    sys.exit(1 if failed else 0)
