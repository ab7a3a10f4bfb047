#!/usr/bin/env python3
"""DDP training steps through torch.distributed: the braid backend beside gloo, interleaved in one run.

Every rank trains the same MLP (depth x Linear(width, width) + ReLU) under DistributedDataParallel
twice, once over a braid group and once over gloo, alternating which goes first per repetition.
Per backend it times, each the median over the timed steps and the slowest rank's median:
  step     forward, backward (DDP allreduces gradient buckets as they fill), optimizer step;
  compute  the same step under ddp.no_sync(): no communication at all;
  comm     one all_reduce of a flat tensor as large as all gradients together.
overlap = (compute + comm - step) / min(compute, comm): 0 when the allreduces wait for the backward
pass to finish, 1 when they hide completely behind it (negative: DDP's bucketing costs more than it
hides). gloo/braid is the step-time ratio (> 1: braid faster).

    /usr/bin/python3 perf/torch_ddp_perf.py [--build build] [--np 2] [--width 512] [--depth 8]

Writes the table to stdout and, as markdown, to perf/results/DATE-torch-ddp-npN.md (--out).
Timings on a shared 2-core VM are noisy: compare the two backends within one run, not across runs.
"""
import argparse
import copy
import datetime
import os
import statistics
import sys
import tempfile
import time

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def timed(fn, steps):
    out = []
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def rank_main(rank, world, args, init_file, results):
    import braid_torch
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    braid = dist.new_group(backend="braid")
    groups = {"braid": braid, "gloo": dist.group.WORLD}
    shared = {"braid shm"} if args.shared_memory else set()  # runs whose model and buckets are shared memory
    if args.shared_memory:
        groups = {"braid": braid, "braid shm": braid, "gloo": dist.group.WORLD}
    torch.manual_seed(0)
    layers = []
    for _ in range(args.depth):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers)
    torch.manual_seed(1 + rank)
    x = torch.randn(args.batch, args.width)
    y = torch.randn(args.batch, args.width)
    nparams = sum(p.numel() for p in model.parameters())

    runs = {}
    for name, g in groups.items():
        braid_torch.use_shared_memory(name in shared, min_bytes=64 << 10)
        ddp = DDP(copy.deepcopy(model), process_group=g, bucket_cap_mb=args.bucket_mb)
        buf = torch.zeros(nparams)  # the comm-only run's buffer, in shared memory where the run is
        braid_torch.use_shared_memory(False)
        opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)

        def step(ddp=ddp, opt=opt):
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(ddp(x), y).backward()
            opt.step()

        def local(ddp=ddp, opt=opt):
            with ddp.no_sync():
                opt.zero_grad(set_to_none=True)
                torch.nn.functional.mse_loss(ddp(x), y).backward()
            opt.step()

        def comm(g=g, buf=buf):
            dist.all_reduce(buf, group=g)

        runs[name] = {"step": step, "compute": local, "comm": comm}

    times = {name: {k: [] for k in ("step", "compute", "comm")} for name in groups}
    for rep in range(args.reps):
        order = list(groups) if rep % 2 == 0 else list(reversed(groups))
        for name in order:
            for kind in ("step", "compute", "comm"):
                fn = runs[name][kind]
                for _ in range(args.warmup):
                    fn()
                dist.barrier(group=groups["gloo"])
                times[name][kind] += timed(fn, args.steps)
    kinds = ("step", "compute", "comm")
    medians = torch.tensor([[statistics.median(times[n][k]) for k in kinds] for n in groups], dtype=torch.float64)
    dist.all_reduce(medians, op=dist.ReduceOp.MAX, group=groups["gloo"])  # the slowest rank's medians
    if rank == 0:
        results.put(({n: dict(zip(kinds, row)) for n, row in zip(groups, medians.tolist())}, nparams))
    dist.destroy_process_group()


def table(res):
    lines = [
        "| backend | step ms | compute ms | comm ms | overlap |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, t in res.items():
        overlap = (t["compute"] + t["comm"] - t["step"]) / min(t["compute"], t["comm"])
        lines.append(f"| {name} | {t['step'] * 1e3:.1f} | {t['compute'] * 1e3:.1f} | {t['comm'] * 1e3:.1f} | {overlap:.2f} |")
    lines.append("")
    for name in res:
        if name != "gloo":
            lines.append(f"gloo/{name} step time: {res['gloo']['step'] / res[name]['step']:.2f} (> 1: {name} faster)")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.path.join(TOP, "build"), help="meson build directory (default: build)")
    p.add_argument("--np", type=int, default=2, help="ranks (default 2)")
    p.add_argument("--width", type=int, default=512, help="features per layer (default 512)")
    p.add_argument("--depth", type=int, default=8, help="Linear layers (default 8)")
    p.add_argument("--batch", type=int, default=64, help="samples per rank and step (default 64)")
    p.add_argument("--bucket-mb", type=float, default=1.0, help="DDP bucket_cap_mb (default 1)")
    p.add_argument("-n", dest="steps", type=int, default=20, help="timed steps per repetition (default 20)")
    p.add_argument("-w", dest="warmup", type=int, default=3, help="untimed steps per repetition (default 3)")
    p.add_argument("-r", dest="reps", type=int, default=3, help="interleaved repetitions (default 3)")
    p.add_argument("--shared-memory", action="store_true",
                   help="also braid with the model and DDP's buckets in braid_torch.use_shared_memory tensors")
    p.add_argument("--out", help="markdown file (default perf/results/DATE-torch-ddp-npN.md); '-' for none")
    args = p.parse_args()
    if args.np < 2 or args.width < 1 or args.depth < 1 or args.steps < 1:
        p.error("need --np >= 2 and positive --width, --depth, -n")

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
    init_file = tempfile.mktemp(prefix="torch-ddp-perf-")
    results = mp.get_context("fork").SimpleQueue()
    started = time.time()
    mp.start_processes(rank_main, args=(args.np, args, init_file, results), nprocs=args.np, start_method="fork")
    res, nparams = results.get()
    elapsed = time.time() - started
    load_after = os.getloadavg()

    text = table(res)
    print(text)
    if args.out == "-":
        return
    date = datetime.date.today().isoformat()
    out = args.out or os.path.join(TOP, "perf", "results", f"{date}-torch-ddp-np{args.np}.md")
    v = braid_torch.braid_version
    with open(out, "w") as f:
        f.write(f"# DDP training steps through torch.distributed, braid vs gloo, {args.np} ranks, {date}\n\n")
        f.write(
            f"Command: `/usr/bin/python3 perf/torch_ddp_perf.py {' '.join(sys.argv[1:])}` "
            f"(torch {torch.__version__}, braid {v // 10000}.{v // 100 % 100}.{v % 100}, "
            f"{os.cpu_count()} CPUs, load average {load_before[0]:.1f} before, {load_after[0]:.1f} after, "
            f"{elapsed:.0f} s).\n\n"
            f"Model: {args.depth} x Linear({args.width}, {args.width}) + ReLU, {nparams} parameters "
            f"({nparams * 4 / 2**20:.1f} MiB of float32 gradients), batch {args.batch} per rank, SGD, "
            f"bucket_cap_mb {args.bucket_mb}, one thread per rank. {args.reps} interleaved repetitions of "
            f"{args.steps} timed steps per backend and kind; medians, slowest rank. step: a DDP step; compute: "
            "the same step under no_sync(); comm: one all_reduce as large as all gradients; overlap = "
            "(compute + comm - step) / min(compute, comm).\n\n"
            "Noise: the VM has 2 cores shared with other users' builds and tests; the ratio within one run is "
            "the number to read, absolute times move between runs.\n\n"
        )
        f.write(text + "\n")
    print(f"\nwritten to {os.path.relpath(out, TOP)}")


if __name__ == "__main__":
    main()
