#!/usr/bin/env python3
"""AllReduce through torch.distributed: the braid backend beside gloo, interleaved in one run.

Every rank holds a braid group and a gloo group; for each size, repetition after repetition, both
backends run `iters` in-place float32 sum all_reduce calls (alternating which goes first), each call
timed alone. A row's time is the median over all its calls, the slowest rank's median; busbw is
bytes / time * 2(n-1)/n, as nccl-tests count it. The ratio braid/gloo is the busbw ratio
(> 1: braid faster). Results are checked once per size before timing.

    /usr/bin/python3 perf/torch_allreduce_perf.py [--build build] [--np 2] [-b 1K] [-e 64M] [-f 4] [--shared-memory]

--shared-memory adds a third run, braid on tensors from braid_torch.use_shared_memory (in place on
one host), in the same interleaving.

Writes the table to stdout and, as markdown, to perf/results/DATE-torch-allreduce-npN.md (--out).
Timings on a shared 2-core VM are noisy: compare the two backends within one run, not across runs.
"""
import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def human(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def iterations(nbytes, base):
    """Enough calls for a stable median at small sizes, few at large ones."""
    return max(5, min(base, int(base * (256 << 10) / max(nbytes, 1))))


def rank_main(rank, world, args, init_file, results):
    import braid_torch
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    braid, gloo = dist.new_group(backend="braid"), dist.group.WORLD
    # Runs: name -> (group, whether its tensor comes from braid_torch.use_shared_memory).
    runs = {"braid": (braid, False), "gloo": (gloo, False)}
    if args.shared_memory:
        runs = {"braid": (braid, False), "braid shm": (braid, True), "gloo": (gloo, False)}
    rows = []
    size = args.min_bytes
    while size <= args.max_bytes:
        count = max(1, size // 4)
        bufs = {}
        for name, (g, shared) in runs.items():
            braid_torch.use_shared_memory(shared, min_bytes=0)
            bufs[name] = torch.ones(count)
        braid_torch.use_shared_memory(False)
        for name, (g, _) in runs.items():  # correctness once: a sum of ones is the rank count
            buf = bufs[name]
            buf.fill_(1.0)
            dist.all_reduce(buf, group=g)
            if not torch.all(buf == world):
                raise SystemExit(f"rank {rank}: {name} all_reduce of {size} bytes gave a wrong result")
            buf.zero_()
        iters = iterations(size, args.iters)
        times = {name: [] for name in runs}
        for rep in range(args.reps):
            order = list(runs) if rep % 2 == 0 else list(reversed(runs))
            for name in order:
                g, buf = runs[name][0], bufs[name]
                for _ in range(args.warmup):
                    dist.all_reduce(buf, group=g)
                dist.barrier(group=gloo)
                for _ in range(iters):
                    start = time.perf_counter()
                    dist.all_reduce(buf, group=g)
                    times[name].append(time.perf_counter() - start)
        medians = torch.tensor([statistics.median(times[name]) for name in runs], dtype=torch.float64)
        dist.all_reduce(medians, op=dist.ReduceOp.MAX, group=gloo)  # the slowest rank's median
        rows.append((count * 4, iters * args.reps, dict(zip(runs, medians.tolist()))))
        size *= args.factor
    if rank == 0:
        results.put(rows)
    dist.destroy_process_group()


def table(rows, world):
    factor = 2 * (world - 1) / world
    names = list(rows[0][2])
    ours = [n for n in names if n != "gloo"]
    lines = [
        "| size | calls | " + " | ".join(f"{n} us" for n in names) + " | "
        + " | ".join(f"{n} busbw GB/s" for n in names) + " | " + " | ".join(f"{n}/gloo" for n in ours) + " |",
        "|---:|---:|" + "---:|" * (2 * len(names) + len(ours)),
    ]
    for nbytes, calls, t in rows:
        bw = {k: nbytes / v / 1e9 * factor for k, v in t.items()}
        lines.append(
            f"| {human(nbytes)} | {calls} | " + " | ".join(f"{t[n] * 1e6:.1f}" for n in names) + " | "
            + " | ".join(f"{bw[n]:.3f}" for n in names) + " | "
            + " | ".join(f"{bw[n] / bw['gloo']:.1f}" for n in ours) + " |"
        )
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.path.join(TOP, "build"), help="meson build directory (default: build)")
    p.add_argument("--np", type=int, default=2, help="ranks (default 2)")
    p.add_argument("-b", dest="min_bytes", type=parse_size, default=1 << 10, help="smallest size (default 1K)")
    p.add_argument("-e", dest="max_bytes", type=parse_size, default=64 << 20, help="largest size (default 64M)")
    p.add_argument("-f", dest="factor", type=int, default=4, help="size factor (default 4)")
    p.add_argument("-n", dest="iters", type=int, default=100, help="timed calls per repetition at <= 256K (default 100)")
    p.add_argument("-w", dest="warmup", type=int, default=3, help="untimed calls per repetition (default 3)")
    p.add_argument("-r", dest="reps", type=int, default=3, help="interleaved repetitions (default 3)")
    p.add_argument("--shared-memory", action="store_true",
                   help="also braid on tensors from braid_torch.use_shared_memory (in place on one host)")
    p.add_argument("--out", help="markdown file (default perf/results/DATE-torch-allreduce-npN.md); '-' for none")
    args = p.parse_args()
    if args.np < 2 or args.factor < 2 or args.min_bytes < 4 or args.max_bytes < args.min_bytes:
        p.error("need --np >= 2, -f >= 2 and 4 <= -b <= -e")

    sys.path.insert(0, os.path.join(args.build, "bindings", "torch"))
    try:
        import torch
        import torch.multiprocessing as mp

        import braid_torch
    except ImportError as exc:
        sys.exit(f"cannot import torch and braid_torch ({exc}): use /usr/bin/python3 and a build with -Dtorch")
    os.environ.setdefault("BRAID_SOCKET_IFNAME", "lo")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")

    load_before = os.getloadavg()
    init_file = tempfile.mktemp(prefix="torch-allreduce-perf-")
    ctx = mp.get_context("fork")
    results = ctx.SimpleQueue()
    started = time.time()
    mp.start_processes(rank_main, args=(args.np, args, init_file, results), nprocs=args.np, start_method="fork")
    rows = results.get()
    elapsed = time.time() - started
    load_after = os.getloadavg()

    text = table(rows, args.np)
    print(text)
    if args.out == "-":
        return
    date = datetime.date.today().isoformat()
    out = args.out or os.path.join(TOP, "perf", "results", f"{date}-torch-allreduce-np{args.np}.md")
    v = braid_torch.braid_version
    with open(out, "w") as f:
        f.write(f"# AllReduce through torch.distributed, braid vs gloo, {args.np} ranks, float32 sum, {date}\n\n")
        f.write(
            f"Command: `/usr/bin/python3 perf/torch_allreduce_perf.py {' '.join(sys.argv[1:])}` "
            f"(torch {torch.__version__}, braid {v // 10000}.{v // 100 % 100}.{v % 100}, "
            f"{os.cpu_count()} CPUs, load average {load_before[0]:.1f} before, {load_after[0]:.1f} after, "
            f"{elapsed:.0f} s).\n\n"
            f"Each row: {args.reps} interleaved repetitions of `calls / {args.reps}` timed in-place calls per backend "
            "(after warm-up); time = median call, slowest rank; busbw = bytes / time x 2(n-1)/n; "
            "braid/gloo = busbw ratio (> 1: braid faster). Both backends go through the same Python path "
            "(`dist.all_reduce` then `Work.wait`), so small sizes measure that path as much as the library.\n\n"
            "Noise: the VM has 2 cores shared with other users' builds and tests; the ratio within one run is "
            "the number to read, absolute times move between runs.\n\n"
        )
        f.write(text + "\n")
    print(f"\nwritten to {os.path.relpath(out, TOP)}")


if __name__ == "__main__":
    main()
