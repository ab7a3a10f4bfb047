"""all_reduce of sparse COO tensors on braid against gloo's, on 2 and 3 ranks, in one run each: the
default group is gloo, the braid group comes from new_group, and every case runs the same inputs
through both. Cases: overlapping and disjoint indices, nnz 0 on some or all ranks, duplicate
(uncoalesced) indices, a dense dimension in the values, 1-D to 3-D, every dtype braid_torch takes
(float16 and bfloat16, which gloo cannot sum sparse, against its float64 sum). Results
must match gloo's: same shape, same coalesced indices, same values (within fp tolerance), same dense
equivalent. Any op but SUM is refused with a clear error, as gloo refuses it.
"""
import sys

import harness
import torch
import torch.distributed as dist

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int32,
          torch.int64]


def sparse(indices, values, shape, dtype):
    i = torch.tensor(indices, dtype=torch.int64).reshape(len(indices), -1)
    return torch.sparse_coo_tensor(i, torch.tensor(values, dtype=torch.float64).to(dtype), shape)


def cases(rank, world):
    """name -> this rank's input (a fresh sparse tensor each call)."""
    r = rank
    return {
        "overlapping": lambda dt: sparse([[0, 2, 5]], [r + 1, 2 * r + 1, 3], (8,), dt),
        "disjoint": lambda dt: sparse([[2 * r, 2 * r + 1]], [r + 1, r + 2], (2 * world,), dt),
        "empty on rank 1": lambda dt: (sparse([[]], [], (6,), dt) if r == 1 else sparse([[r, 5]], [1, r + 4], (6,), dt)),
        "empty everywhere": lambda dt: sparse([[]], [], (6,), dt),
        "duplicates": lambda dt: sparse([[1, 1, 4, 1]], [1, r, 2, 3], (5,), dt),
        "2-D": lambda dt: sparse([[0, r, 3], [1, 2, r]], [r + 1, 2, 5], (4, 4), dt),
        "3-D": lambda dt: sparse([[r, 0], [1, r], [0, 2]], [7, r + 1], (3, 3, 3), dt),
        "dense rows": lambda dt: torch.sparse_coo_tensor(torch.tensor([[r % 3, 4]]),
                                                         torch.arange(6).reshape(2, 3).to(dt) + r, (5, 3)),
    }


def same(got, want, what):
    assert got.is_sparse and want.is_sparse, f"{what}: not sparse ({got.layout}, {want.layout})"
    assert got.shape == want.shape and got.dtype == want.dtype, f"{what}: {got.dtype}{tuple(got.shape)} vs {want.dtype}{tuple(want.shape)}"
    g, w = got.coalesce(), want.coalesce()
    assert torch.equal(g.indices(), w.indices()), f"{what}: indices {g.indices().tolist()} vs gloo {w.indices().tolist()}"
    if got.is_floating_point():
        rtol = 1e-2 if got.dtype in (torch.float16, torch.bfloat16) else 1e-6
        assert torch.allclose(g.values().double(), w.values().double(), rtol=rtol, atol=0), f"{what}: values {g.values()} vs {w.values()}"
        assert torch.allclose(got.to_dense().double(), want.to_dense().double(), rtol=rtol, atol=0), f"{what}: dense differs"
    else:
        assert torch.equal(g.values(), w.values()), f"{what}: values {g.values().tolist()} vs {w.values().tolist()}"
        assert torch.equal(got.to_dense(), want.to_dense()), f"{what}: dense differs"


def rank_main(rank, world, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    gloo = dist.group.WORLD
    braid = dist.new_group(backend="braid")
    checked = 0
    for name, make in cases(rank, world).items():
        for dtype in DTYPES:
            # gloo's reference; where gloo lacks the dtype, gloo's sum of float64 copies, cast back
            # (small integers: every dtype holds them exactly).
            gloo_dtype = dtype if dtype not in (torch.float16, torch.bfloat16) else torch.float64
            want = make(gloo_dtype)
            dist.all_reduce(want, group=gloo)
            want = want.to(dtype)
            got = make(dtype)
            dist.all_reduce(got, group=braid)
            same(got, want, f"{name} [{dtype}]")
            # Also the dense equivalent of every rank's input, summed: what a sparse sum must be.
            dense = make(gloo_dtype).to_dense()
            dist.all_reduce(dense, group=gloo)
            assert torch.equal(got.to_dense(), dense.to(dtype)), f"{name} [{dtype}]: not the sum of the dense tensors"
            checked += 1
    # Asynchronous form: the Work is complete and its result is the summed tensor.
    t = cases(rank, world)["overlapping"](torch.float32)
    work = dist.all_reduce(t, group=braid, async_op=True)
    assert work.wait() and work.is_completed() and work.result()[0].is_sparse
    # Another op than SUM: refused on both, saying so; nothing issued, so the group still works.
    for group, words in ((braid, ["braid", "SUM"]), (gloo, [])):
        try:
            dist.all_reduce(cases(rank, world)["overlapping"](torch.float32), op=dist.ReduceOp.MAX, group=group)
            raise AssertionError(f"sparse MAX accepted by {dist.get_backend(group)}")
        except RuntimeError as exc:
            assert all(w in str(exc) for w in words), f"the refusal does not say {words}: {exc}"
    d = torch.ones(3)
    dist.all_reduce(d, group=braid)
    assert torch.equal(d, torch.full((3,), float(world))), d
    dist.destroy_process_group()
    return checked


if __name__ == "__main__":
    failed = 0
    for world in (2, 3):
        res = harness.run_ranks(rank_main, world, args=(harness.free_port(),), deadline_s=90)
        failed += harness.check_all(res, f"sparse all_reduce on {world} ranks, braid vs gloo")
        if res.get(0, (False,))[0]:
            print(f"     {res[0][1]} cases compared on {world} ranks")
    sys.exit(1 if failed else 0)
