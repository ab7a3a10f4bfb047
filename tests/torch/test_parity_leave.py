"""A rank that leaves while the others wait for it: they get an error naming it, promptly, as with
gloo. Forked ranks leaving through the interpreter's real exit (test_parity_exit.py's machinery),
BRAID_TIMEOUT=60; times are printed, a generous 30 s is asserted.

1. Rank 1 exits (sys.exit(3)) while the others wait for it, 2 and 3 ranks: once cleanly while they
   wait in an all_reduce it never joins, once with a receive of its own pending while they wait to
   receive from it.
2. Rank 0 ends with an uncaught exception while the others wait in an all_reduce (braid on 2 and 3
   ranks, gloo on 2 for comparison).
3. Rank 0 leaves cleanly while the others wait in an all_reduce it never joins, once through
   destroy_process_group (whose time is printed) and once through sys.exit(0) alone (braid on 2 and
   3 ranks, gloo on 2 for comparison). Its goodbye says how far it got, so the others fail at once,
   and rank 0 goes without waiting for them to leave.
"""
import sys
import time

import torch
import torch.distributed as dist
from test_parity_exit import _init, _mark, check_exits, run


def peer_leaves(rank, world, backend, path, out, pending):
    _init(backend, rank, world, path)
    t = torch.ones(4)
    dist.all_reduce(t)
    if rank == 1:
        time.sleep(0.5)  # the others wait for rank 1 by then
        if pending:
            # Never matched, and dropped at once (nobody keeps the Work). (Not while the others are
            # in a collective: braid matches a pair's messages in issue order, so a receive from
            # rank 0 would take rank 0's part of that collective.)
            dist.irecv(torch.zeros(4), src=0)
        _mark(out, rank, what="exit")
        sys.exit(3)
    try:
        if pending:
            dist.recv(torch.zeros(4), src=1)  # rank 1 sends nothing, it leaves with its receive pending
        else:
            dist.all_reduce(t)  # needs rank 1, which leaves instead
        _mark(out, rank, what="error", error=None)
    except RuntimeError as exc:
        _mark(out, rank, what="error", error=str(exc))
    _mark(out, rank, what="exit")


def _all_reduce_without_root(rank, out, t):
    """An all_reduce that rank 0 never joins: marks the error it raises (None if none), then the exit."""
    try:
        dist.all_reduce(t)
        _mark(out, rank, what="error", error=None)
    except RuntimeError as exc:
        _mark(out, rank, what="error", error=str(exc))
    _mark(out, rank, what="exit")


def root_raises(rank, world, backend, path, out):
    _init(backend, rank, world, path)
    t = torch.ones(4)
    dist.all_reduce(t)
    if rank == 0:
        time.sleep(0.5)  # the others wait in the next all_reduce by then
        _mark(out, rank, what="exit")
        raise RuntimeError("rank 0 gives up (an uncaught exception: the test wants it)")
    _all_reduce_without_root(rank, out, t)


def root_leaves(rank, world, backend, path, out, destroy):
    _init(backend, rank, world, path)
    t = torch.ones(4)
    dist.all_reduce(t)
    if rank == 0:
        time.sleep(0.5)  # the others wait in the next all_reduce by then
        if destroy:
            start = time.monotonic()
            dist.destroy_process_group()
            _mark(out, rank, what="destroyed", seconds=time.monotonic() - start)
        _mark(out, rank, what="exit")
        sys.exit(0)
    _all_reduce_without_root(rank, out, t)


def check_peers_named(res, what, world, leaver, strict):
    """The ranks other than `leaver` raised an error naming it; prints how long after it left."""
    failed = 0
    left = next((m["t"] for m in res[leaver][1] if m["what"] == "exit"), None)
    for rank in range(world):
        if rank == leaver:
            continue
        errs = [m for m in res[rank][1] if m["what"] == "error"]
        msg = errs[0]["error"] if errs else None
        named = msg and (f"rank {leaver}" in msg if strict else True)
        if not named:
            print(f"{'FAIL' if strict else 'note'} {what}: rank {rank} got no error naming rank {leaver}: {msg!r}")
            failed += strict
        elif left is not None:
            print(f"     {what}: rank {rank} raised {errs[0]['t'] - left:.2f} s after rank {leaver} left: "
                  f"{msg.splitlines()[0][:200]}")
    return failed


def main():
    failed = 0
    for world in (2, 3):
        for pending in (False, True):
            what = f"rank 1 exits {'with operations pending' if pending else 'cleanly'} while {world - 1} wait"
            res = run(peer_leaves, world, "braid", pending)
            failed += check_exits(res, what, {1: 3})
            failed += check_peers_named(res, what, world, 1, True)

    for world in (2, 3):
        for backend in ("braid", "gloo") if world == 2 else ("braid",):
            what = f"rank 0 raises while {world - 1} wait, {backend}"
            res = run(root_raises, world, backend)
            failed += check_exits(res, what, {0: 1}, strict=backend == "braid")
            failed += check_peers_named(res, what, world, 0, backend == "braid")

    for world in (2, 3):
        for destroy in (True, False):
            for backend in ("braid", "gloo") if world == 2 else ("braid",):
                how = "destroy_process_group" if destroy else "sys.exit(0)"
                what = f"rank 0 leaves cleanly ({how}) while {world - 1} wait, {backend}"
                strict = backend == "braid"
                res = run(root_leaves, world, backend, destroy)
                failed += check_exits(res, what, {}, strict=strict)
                failed += check_peers_named(res, what, world, 0, strict)
                if destroy:
                    took = [m.get("seconds") for m in res[0][1] if m["what"] == "destroyed"]
                    if not took:
                        print(f"{'FAIL' if strict else 'note'} {what}: destroy_process_group did not return on rank 0")
                        failed += strict
                    else:
                        print(f"     {what}: destroy_process_group took {took[0]:.2f} s on rank 0")

    print("ok   leave parity" if failed == 0 else f"FAIL leave parity: {failed} problem(s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
