"""A barrier whose peer does not come in time raises a RuntimeError whose message torch's own tests
would accept (they match " (Timed out|closed|timeout) ", which Gloo's "Timed out" satisfies) and that
names the ranks, on 2 ranks:

1. The group's timeout (new_group(timeout=1 s)): rank 0 enters the barrier, rank 1 only after
   rank 0 gave up; gloo's barrier in the same situation, for comparison. The braid message names
   the waiting rank; the barrier, still pending, completes once rank 1 enters it.
2. braid's own deadline (BRAID_TIMEOUT=3): rank 1 never enters in time; rank 0's message names
   rank 1 as the rank it waited for, and rank 1's next call fails too.
"""
import re
import sys
import time
from datetime import timedelta

import harness
import torch
import torch.distributed as dist

TORCH_TIMEOUT_RE = re.compile(" (Timed out|closed|timeout) ")  # torch's distributed_test.py


def group_timeout(rank, world, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    short = timedelta(seconds=1)
    gloo = dist.new_group(backend="gloo", timeout=short)
    braid = dist.new_group(backend="braid", timeout=short)
    messages = {}
    if rank == 0:
        for name, group in (("gloo", gloo), ("braid", braid)):
            start = time.monotonic()
            try:
                dist.barrier(group=group)
                raise AssertionError(f"{name}: the barrier passed without rank 1")
            except RuntimeError as exc:
                messages[name] = (str(exc), time.monotonic() - start)
    dist.barrier()  # the default group: rank 1 enters braid's barrier only now
    if rank == 1:
        dist.barrier(group=braid)  # matches rank 0's, which braid still runs
    dist.barrier()
    t = torch.ones(3)
    dist.all_reduce(t, group=braid)  # the group still works
    assert torch.equal(t, torch.full((3,), 2.0)), t
    return messages


def braid_deadline(rank, world, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    braid = dist.new_group(backend="braid")  # BRAID_TIMEOUT=3 from the environment
    if rank == 1:
        time.sleep(6)  # past rank 0's deadline
    start = time.monotonic()
    try:
        dist.barrier(group=braid)
        raise AssertionError(f"rank {rank}: the barrier passed")
    except RuntimeError as exc:
        return str(exc), time.monotonic() - start


def main():
    failed = 0
    res = harness.run_ranks(group_timeout, 2, args=(harness.free_port(),), deadline_s=60)
    failed += harness.check_all(res, "group timeout: barrier on braid and gloo")
    if res.get(0, (False,))[0]:
        for name, (msg, took) in res[0][1].items():
            print(f"     {name} after {took:.2f} s: {msg.splitlines()[0][:240]}")
            if not TORCH_TIMEOUT_RE.search(msg):
                print(f"FAIL {name}: the message does not match torch's {TORCH_TIMEOUT_RE.pattern!r}")
                failed += 1
        msg = res[0][1]["braid"][0]
        if "Timed out" not in msg or "rank 0" not in msg:
            print(f"FAIL braid: the message lacks 'Timed out' or the rank: {msg}")
            failed += 1

    res = harness.run_ranks(braid_deadline, 2, args=(harness.free_port(),), env={"BRAID_TIMEOUT": "3"},
                            deadline_s=60)
    failed += harness.check_all(res, "BRAID_TIMEOUT: barrier without rank 1")
    for rank in sorted(res):
        ok, value = res[rank]
        if not ok:
            continue
        msg, took = value
        print(f"     rank {rank} after {took:.2f} s: {msg.splitlines()[0][:240]}")
        if not TORCH_TIMEOUT_RE.search(msg) or "waiting for rank 1" not in msg:
            print(f"FAIL rank {rank}: the message does not match torch's pattern or lacks 'waiting for rank 1'")
            failed += 1
    print("ok   timeout messages" if failed == 0 else f"FAIL timeout messages: {failed} problem(s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
