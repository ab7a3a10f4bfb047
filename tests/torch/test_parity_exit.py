"""Leaving with an operation pending ends promptly, as with gloo.

Each rank is a forked process that leaves through the interpreter's real exit (sys.exit or the end of
the program: atexit handlers, then Python's teardown), not the harness's os._exit, because that exit
is what is being tested. BRAID_TIMEOUT=60: a rank that only ends when braid's deadline fires takes a
minute; the cases assert a generous 30 s (anything prompt is far below) and print the measured times.
gloo runs the same programs for comparison (printed, not asserted). test_parity_leave.py uses the
same machinery for what the peers see.

1. A receive that is never matched (rank 1 irecv's from rank 0, which never sends), 2 and 3 ranks:
   every process ends.
2. destroy_process_group with a receive pending returns, and the process ends.
"""
import json
import os
import signal
import sys
import time

import harness
import torch
import torch.distributed as dist

BRAID_TIMEOUT = 60
BOUND_S = 30.0  # far below BRAID_TIMEOUT, far above a prompt exit
KILL_AFTER_S = 45.0


def _mark(out, rank, **fields):
    with open(f"{out}.{rank}", "a") as f:
        f.write(json.dumps(dict(fields, t=time.monotonic())) + "\n")


def _init(backend, rank, world, path):
    dist.init_process_group(backend, init_method="file://" + path, rank=rank, world_size=world)


def _all_reduced(rank, world, out):
    """Marks this rank past the first all_reduce and, on rank 1, waits until every rank is. Rank 1's
    abort fails whatever its peers still run on the communicator, and its own all_reduce may end
    before theirs (its last bytes still on the way): a peer that had not finished would fail it."""
    _mark(out, rank, what="reduced")
    if rank != 1:
        return
    deadline = time.monotonic() + 20
    for r in range(world):
        while time.monotonic() < deadline:
            if os.path.exists(f"{out}.{r}") and '"reduced"' in open(f"{out}.{r}").read():
                break
            time.sleep(0.01)


def pending_recv(rank, world, backend, path, out):
    _init(backend, rank, world, path)
    t = torch.ones(4)
    dist.all_reduce(t)  # everyone is connected
    _all_reduced(rank, world, out)
    if rank == 1:
        work = dist.irecv(torch.zeros(4), src=0)  # rank 0 never sends
        _mark(out, rank, what="exit")
        sys.exit(0)  # with `work` still referenced by this frame
    _mark(out, rank, what="exit")  # rank 0 (and 2) just reach the end of the program


def destroy_pending(rank, world, backend, path, out):
    _init(backend, rank, world, path)
    t = torch.ones(4)
    dist.all_reduce(t)
    _all_reduced(rank, world, out)
    if rank == 1:
        work = dist.irecv(torch.zeros(4), src=0)  # noqa: F841 (kept: still pending at destroy)
        start = time.monotonic()
        dist.destroy_process_group()
        _mark(out, rank, what="destroyed", seconds=time.monotonic() - start)
    _mark(out, rank, what="exit")


def run(fn, world, backend, *args):
    """Forks `world` ranks running fn, each leaving through the interpreter's exit. Returns
    {rank: (exit code or None if killed, [marks], seconds from its exit mark to its end)}."""
    path = harness.temp_path("exit-" + backend)
    out = harness.temp_path("exit-marks")
    pids = {}
    for rank in range(world):
        pid = os.fork()
        if pid == 0:
            # The child leaves through SystemExit (or an uncaught exception), which unwinds back
            # through run() and its callers: they hold no finally blocks, so nothing of the
            # parent's runs here.
            os.environ["BRAID_TIMEOUT"] = str(BRAID_TIMEOUT)
            torch.set_num_threads(1)
            fn(rank, world, backend, path, out, *args)
            sys.exit(0)
        pids[pid] = rank
    ended = {}
    deadline = time.monotonic() + KILL_AFTER_S
    while len(ended) < world and time.monotonic() < deadline:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            time.sleep(0.01)
            continue
        ended[pids[pid]] = (os.waitstatus_to_exitcode(status), time.monotonic())
    for pid, rank in pids.items():
        if rank not in ended:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            ended[rank] = (None, time.monotonic())
    result = {}
    for rank in range(world):
        marks = []
        if os.path.exists(f"{out}.{rank}"):
            with open(f"{out}.{rank}") as f:
                marks = [json.loads(line) for line in f]
            os.unlink(f"{out}.{rank}")
        code, end = ended[rank]
        exits = [m["t"] for m in marks if m["what"] == "exit"]
        result[rank] = (code, marks, end - exits[0] if exits else None)
    if os.path.exists(path):
        os.unlink(path)
    return result


def check_exits(result, what, codes, strict=True):
    """Every rank ended by itself, with the expected code, within BOUND_S of its exit mark. Not
    strict (gloo, for comparison): prints what happened and counts nothing."""
    failed = 0
    for rank, (code, marks, took) in sorted(result.items()):
        want = codes.get(rank, 0)
        if code is None:
            print(f"{'FAIL' if strict else 'note'} {what}: rank {rank} still running after {KILL_AFTER_S} s (killed)")
            failed += strict
        elif code != want or took is None or took > BOUND_S:
            print(f"{'FAIL' if strict else 'note'} {what}: rank {rank} exit code {code} (want {want}), {took} s after "
                  "its exit mark")
            failed += strict
        else:
            print(f"     {what}: rank {rank} ended {took:.2f} s after reaching its exit")
    return failed


def main():
    failed = 0
    for world in (2, 3):
        for backend in ("braid", "gloo") if world == 2 else ("braid",):  # gloo for comparison
            what = f"pending irecv at exit, {world} ranks, {backend}"
            failed += check_exits(run(pending_recv, world, backend), what, {}, strict=backend == "braid")

    for backend in ("braid", "gloo"):
        what = f"destroy_process_group with a receive pending, 2 ranks, {backend}"
        res = run(destroy_pending, 2, backend)
        failed += check_exits(res, what, {}, strict=backend == "braid")
        took = [m.get("seconds") for m in res[1][1] if m["what"] == "destroyed"]
        if not took:
            print(f"{'FAIL' if backend == 'braid' else 'note'} {what}: destroy_process_group did not return on rank 1")
            failed += backend == "braid"
        else:
            print(f"     {what}: destroy_process_group took {took[0]:.2f} s")

    print("ok   exit parity" if failed == 0 else f"FAIL exit parity: {failed} problem(s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
