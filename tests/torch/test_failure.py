"""A rank that dies makes the others raise, with braid's message naming it, instead of hanging.

3 ranks (file:// rendezvous), BRAID_TIMEOUT=20: after a first all_reduce, rank 1 leaves with
os._exit; ranks 0 and 2 keep calling all_reduce and must get a RuntimeError that names rank 1.
The harness kills anything still running after 60 s and reports it as a hang.
"""
import os
import sys

import harness
import torch
import torch.distributed as dist

WORLD = 3
DEAD = 1


def rank_main(rank, world, path):
    dist.init_process_group("braid", init_method="file://" + path, rank=rank, world_size=world)
    t = torch.ones(1000)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((1000,), float(world)))
    if rank == DEAD:
        os._exit(0)  # no goodbye, no destructors: as if killed
    for i in range(10_000):  # the death is seen within a few calls; BRAID_TIMEOUT bounds it anyway
        try:
            dist.all_reduce(t)
        except RuntimeError as exc:
            return str(exc)
    raise AssertionError("10000 all_reduce calls succeeded with a dead rank")


if __name__ == "__main__":
    res = harness.run_ranks(rank_main, WORLD, args=(harness.temp_path("failure"),),
                            env={"BRAID_TIMEOUT": "20"}, deadline_s=60)
    failed = 0
    for rank in sorted(res):
        ok, value = res[rank]
        if rank == DEAD:
            expected = (False, "exited with code 0 without reporting")
            if (ok, value) != expected:
                print(f"FAIL rank {DEAD} should have died silently, got {ok}: {value}")
                failed += 1
            continue
        if not ok:
            print(f"FAIL rank {rank}:\n{value}")
            failed += 1
        elif "braid" not in value or f"rank {DEAD}" not in value:
            print(f"FAIL rank {rank}: the error does not name rank {DEAD}: {value}")
            failed += 1
        else:
            print(f"ok   rank {rank} raised: {value.splitlines()[0]}")
    sys.exit(1 if failed else 0)
