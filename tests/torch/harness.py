"""Shared by the braid_torch tests: skip rules, and ranks as forked processes with a hard deadline.

Exit 77 (meson's skip) when torch or braid_torch cannot be imported, with the reason printed, unless
BRAID_TORCH_REQUIRED=1 (set by meson when it built the module): then an import failure fails.
Ranks are forked from the test process after torch was imported (cheaper than spawning: importing
torch costs seconds per process on 2 shared cores), so a rank must not use tensors before the fork.
"""
import atexit
import os
import queue
import sys
import tempfile
import time
import traceback
import warnings

SKIP = 77


def _skip_or_fail(reason):
    if os.environ.get("BRAID_TORCH_REQUIRED") == "1":
        print(f"FAIL: {reason} (meson built braid_torch, so this must work)")
        sys.exit(1)
    print(f"SKIP: {reason}")
    sys.exit(SKIP)


try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError as exc:
    print(f"SKIP: torch is not importable by {sys.executable}: {exc}")
    sys.exit(SKIP)
if not dist.is_available():
    print(f"SKIP: this torch ({torch.__version__}) has no torch.distributed")
    sys.exit(SKIP)
try:
    import braid_torch  # noqa: F401  (registers the backend "braid")
except ImportError as exc:
    _skip_or_fail(f"braid_torch is not importable (PYTHONPATH={os.environ.get('PYTHONPATH', '')}): {exc}")
if getattr(braid_torch, "__file__", None) is None:
    # A build directory whose torch option was turned off keeps an empty braid_torch folder, which
    # Python imports as a namespace package that registers nothing.
    _skip_or_fail(f"braid_torch at {list(braid_torch.__path__)} is an empty folder, not the built module")

# torch 1.13 warns about deprecations at every call of some collectives (all_reduce_coalesced).
warnings.filterwarnings("ignore", category=UserWarning, module="torch.distributed")

# Ranks talk over loopback, whatever interfaces the machine has.
os.environ.setdefault("BRAID_SOCKET_IFNAME", "lo")
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")


def free_port():
    """A port that is free now with the one after it (braid listens on MASTER_PORT + 1), from below
    the kernel's ephemeral range: a port there can be taken by any outgoing connection meanwhile."""
    import random
    import socket

    def bindable(port):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return True
            except OSError:
                return False

    rng = random.Random(os.getpid())
    for _ in range(200):
        port = rng.randrange(20000, 32000)
        if bindable(port) and bindable(port + 1):
            return port
    return 29500


def temp_path(tag):
    """A fresh path for a file:// rendezvous (the file must not exist yet). The process that asked
    removes it when it exits: a FileStore removes its file only when every rank closes it cleanly,
    so a test that kills a rank would otherwise leave it in /tmp."""
    fd, path = tempfile.mkstemp(prefix=f"braid-torch-{tag}-")
    os.close(fd)
    os.unlink(path)
    owner = os.getpid()

    def remove():
        if os.getpid() == owner:  # not in a forked rank that leaves through the interpreter's exit
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    atexit.register(remove)
    return path


def _child(fn, rank, world, args, env, results):
    try:
        os.environ.update(env or {})
        torch.set_num_threads(1)  # ranks share 2 cores
        value = fn(rank, world, *args)
        results.put((rank, True, value))
    except BaseException:  # report everything, including assertion errors, to the parent
        results.put((rank, False, traceback.format_exc()))
    finally:
        # Leave without running the parent's atexit handlers; the queue's feeder thread first.
        results.close()
        results.join_thread()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def run_ranks(fn, world, args=(), env=None, deadline_s=60):
    """Runs fn(rank, world, *args) in `world` forked processes. Returns {rank: (ok, value)}, where
    value is fn's return value or the traceback; a rank that exits without reporting, or that is
    still running at the deadline (then killed), has ok False and a description."""
    ctx = mp.get_context("fork")
    results = ctx.Queue()
    procs = [ctx.Process(target=_child, args=(fn, r, world, args, env, results)) for r in range(world)]
    for p in procs:
        p.start()
    out = {}
    end = time.monotonic() + deadline_s
    while len(out) < world and time.monotonic() < end:
        try:
            rank, ok, value = results.get(timeout=0.2)
            out[rank] = (ok, value)
        except queue.Empty:
            if all(not p.is_alive() for p in procs) and results.empty():
                break
    for r, p in enumerate(procs):
        p.join(timeout=max(0.1, end - time.monotonic()) if r in out else 0.1)
        if p.is_alive():
            p.kill()
            p.join()
            out.setdefault(r, (False, f"still running after {deadline_s} s: killed (a hang)"))
        out.setdefault(r, (False, f"exited with code {p.exitcode} without reporting"))
    return out


def check_all(results, what):
    """Prints every rank's outcome; returns the number of failed ranks."""
    failed = 0
    for rank in sorted(results):
        ok, value = results[rank]
        if not ok:
            failed += 1
            print(f"FAIL {what}: rank {rank}:\n{value}")
    if failed == 0:
        print(f"ok   {what}")
    return failed
