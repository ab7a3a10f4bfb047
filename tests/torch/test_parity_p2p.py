"""Point to point on braid against gloo, in the same processes, on 2 and 3 ranks: the default group is
gloo (tcp:// rendezvous), a braid group comes from new_group, and every case runs the same calls on
both and compares what each rank received. Cases: receives from any source (recv and irecv with
src=None) from several senders, in whatever order they arrive; interleaved tags (tag 2 sent before
tag 1, received in the other order), small and large (8 MiB); batch_isend_irecv with tags posted in
opposite orders on the two sides; many messages of one tag staying in order.
"""
import sys

import harness
import torch
import torch.distributed as dist

LARGE = 2 << 20  # float32 elements: 8 MiB, far more than a link holds in flight


def msg(rank, k, n=5, dtype=torch.float32):
    """Message k of rank r: its values say who sent it and which one it was."""
    return (torch.arange(n) % 1000 + rank * 1_000_000 + k * 1000).to(dtype)


def any_source(rank, world, g):
    """Every other rank sends 2 messages of tag 7 to rank 0 (blocking), then 1 of tag 8 (nonblocking);
    rank 0 takes them with recv(src=None) and irecv(src=None). Returns, on rank 0, each sender's
    messages in the order they arrived (a sender's own order is kept; senders interleave freely)."""
    if rank != 0:
        for k in range(2):
            dist.send(msg(rank, k), dst=0, group=g, tag=7)
        dist.isend(msg(rank, 9), dst=0, group=g, tag=8).wait()
        return None
    got = {r: [] for r in range(1, world)}
    for _ in range(2 * (world - 1)):
        t = torch.zeros(5)
        src = dist.recv(t, group=g, tag=7)  # src=None: any source; returns the sender
        assert 1 <= src < world, f"recv(src=None) returned source {src}"
        got[src].append(t.tolist())
    works = [(dist.irecv(t, group=g, tag=8), t) for t in [torch.zeros(5) for _ in range(world - 1)]]
    for w, t in works:
        w.wait()
        src = w._source_rank()
        got[src].append(t.tolist())
    return got


def interleaved_tags(rank, world, g, n):
    """Rank 0 sends tag 2 and then tag 1 (nonblocking) to the last rank, which receives tag 1 first
    (blocking) and then tag 2; the last rank answers with tag 1 then tag 2, received in the other
    order by irecv's waited in reverse."""
    last = world - 1
    if rank == 0:
        reqs = [dist.isend(msg(0, 2, n), dst=last, group=g, tag=2), dist.isend(msg(0, 1, n), dst=last, group=g, tag=1)]
        a, b = torch.zeros(n), torch.zeros(n)
        r2 = dist.irecv(b, src=last, group=g, tag=2)
        r1 = dist.irecv(a, src=last, group=g, tag=1)
        r2.wait()
        r1.wait()
        for r in reqs:
            r.wait()
        return [a.sum().item(), b.sum().item(), a[:3].tolist(), b[-3:].tolist()]
    if rank == last:
        one, two = torch.zeros(n), torch.zeros(n)
        dist.recv(one, src=0, group=g, tag=1)
        dist.recv(two, src=0, group=g, tag=2)
        reqs = [dist.isend(msg(last, 1, n), dst=0, group=g, tag=1), dist.isend(msg(last, 2, n), dst=0, group=g, tag=2)]
        for r in reqs:
            r.wait()
        return [one.sum().item(), two.sum().item(), one[:3].tolist(), two[-3:].tolist()]
    return None


def batch_with_tags(rank, world, g):
    """A ring: each rank sends tags 3 and 4 to its right and receives them from its left in the
    opposite order, all in one batch_isend_irecv; then 6 messages of one tag, in order."""
    right, left = (rank + 1) % world, (rank - 1) % world
    r3, r4 = torch.zeros(100, dtype=torch.int64), torch.zeros(100, dtype=torch.int64)
    ops = [dist.P2POp(dist.isend, msg(rank, 3, 100, torch.int64), right, g, tag=3),
           dist.P2POp(dist.isend, msg(rank, 4, 100, torch.int64), right, g, tag=4),
           dist.P2POp(dist.irecv, r4, left, g, tag=4),
           dist.P2POp(dist.irecv, r3, left, g, tag=3)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    sends = [dist.isend(msg(rank, 20 + k, 10), right, group=g, tag=5) for k in range(6)]
    seq = []
    for _ in range(6):
        t = torch.zeros(10)
        dist.recv(t, src=left, group=g, tag=5)
        seq.append(t[0].item())
    for w in sends:
        w.wait()
    return [r3.tolist(), r4.tolist(), seq]


def compare(rank, braid, gloo, case, what, *args):
    got, want = case(rank, dist.get_world_size(), braid, *args), case(rank, dist.get_world_size(), gloo, *args)
    assert got == want, f"{what}: braid {str(got)[:300]} vs gloo {str(want)[:300]}"
    return got


def rank_main(rank, world, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    gloo = dist.group.WORLD
    braid = dist.new_group(backend="braid")
    assert dist.get_backend(braid) == "braid"
    got = compare(rank, braid, gloo, any_source, "any source")
    if rank == 0:
        # Each sender's messages, in its own order: the two of tag 7, then the one of tag 8.
        for r in range(1, world):
            assert got[r] == [msg(r, 0).tolist(), msg(r, 1).tolist(), msg(r, 9).tolist()], f"from rank {r}: {got[r]}"
    for n in (5, LARGE):
        got = compare(rank, braid, gloo, interleaved_tags, f"interleaved tags, {n} elements", n)
        if rank in (0, world - 1):
            peer = world - 1 - rank if world > 1 else 0
            assert got[0] == msg(peer, 1, n).sum().item() and got[1] == msg(peer, 2, n).sum().item(), f"tags crossed: {got}"
    got = compare(rank, braid, gloo, batch_with_tags, "batch_isend_irecv with tags")
    left = (rank - 1) % world
    assert got[0] == msg(left, 3, 100, torch.int64).tolist() and got[1] == msg(left, 4, 100, torch.int64).tolist()
    assert got[2] == [msg(left, 20 + k, 10)[0].item() for k in range(6)], f"one tag out of order: {got[2]}"
    dist.barrier(group=braid)
    dist.destroy_process_group()


if __name__ == "__main__":
    failed = 0
    for world in (2, 3):
        res = harness.run_ranks(rank_main, world, args=(harness.free_port(),), deadline_s=150)
        failed += harness.check_all(res, f"point to point on {world} ranks, braid vs gloo")
    sys.exit(1 if failed else 0)
