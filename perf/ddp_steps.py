#!/usr/bin/env python3
"""DDP on CUDA tensors for a number of steps, timed, for perf/gpu_check.sh.

    python3 perf/ddp_steps.py --world 2 --steps 20 [--backend nccl|braid]

Spawns `world` processes on one host (all on CUDA device 0 when there is one device: braid allows
several ranks per GPU, most NCCL versions refuse them) that train the same small MLP from the same
seed with DistributedDataParallel. Prints one line:

    ddp world=2 backend=nccl steps=20 median_ms=1.234 checksum=0.123456789 nccl=<library>

median_ms is the median step time of rank 0 after 3 warm-up steps; checksum is the sum of every
parameter after the last step (the same inputs and seeds give the same sum, whichever library does
the all-reduce, up to float rounding); nccl names the library that torch's "nccl" backend loaded
(LD_PRELOAD=libbraid_nccl.so puts braid's shim there). --backend braid is braid_torch on CUDA
tensors (PYTHONPATH=<build>/bindings/torch; perf/torch2_check.sh runs it). Exit status 0 on success; a failure prints
the rank's exception and exits 1.
"""
import argparse
import os
import statistics
import sys
import time


def library_loaded():
    # The NCCL library this process mapped: /proc/self/maps names it.
    try:
        with open("/proc/self/maps") as f:
            names = {line.split()[-1] for line in f if "nccl" in line}
    except OSError:
        return "unknown"
    return ",".join(sorted(os.path.basename(n) for n in names if n.startswith("/"))) or "none"


def run(rank, world, args, port, queue):
    import torch
    import torch.distributed as dist

    try:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        if args.backend == "braid":
            import braid_torch  # noqa: F401  (registers "braid"; PYTHONPATH names its build folder)
            # braid's communicator takes the device current now (set above); device_id asks a
            # 2.x torch for the NCCL-style eager connect, which is NCCL's own.
            dist.init_process_group(args.backend, rank=rank, world_size=world)
        else:
            dist.init_process_group(args.backend, rank=rank, world_size=world, device_id=device)
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(args.width, args.width), torch.nn.ReLU(),
            torch.nn.Linear(args.width, args.width), torch.nn.ReLU(),
            torch.nn.Linear(args.width, 16)).to(device)
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index])
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
        gen = torch.Generator(device="cpu").manual_seed(1000 + rank)
        times = []
        for step in range(args.steps + 3):
            x = torch.randn(args.batch, args.width, generator=gen).to(device)
            y = torch.randn(args.batch, 16, generator=gen).to(device)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(ddp(x), y)
            loss.backward()
            opt.step()
            torch.cuda.synchronize()
            if step >= 3:
                times.append(time.perf_counter() - t0)
        checksum = float(sum(p.double().sum().item() for p in model.parameters()))
        dist.destroy_process_group()
        queue.put((rank, statistics.median(times) * 1e3, checksum, library_loaded(), None))
    except Exception as e:  # reported by the parent, which exits 1
        queue.put((rank, 0.0, 0.0, library_loaded(), f"{type(e).__name__}: {e}"))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--backend", default="nccl")
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--port", type=int, default=29611)
    args = p.parse_args()
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=run, args=(r, args.world, args, args.port, queue)) for r in range(args.world)]
    for pr in procs:
        pr.start()
    results = {}
    deadline = time.time() + 240
    while len(results) < args.world and time.time() < deadline:
        try:
            r = queue.get(timeout=5)
            results[r[0]] = r
        except Exception:
            if not any(pr.is_alive() for pr in procs) and queue.empty():
                break
    for pr in procs:
        pr.join(timeout=10)
        if pr.is_alive():
            pr.kill()
    errors = [f"rank {r}: {v[4]}" for r, v in sorted(results.items()) if v[4]]
    if len(results) < args.world:
        errors.append(f"{args.world - len(results)} rank(s) gave no result (died or hung)")
    if errors:
        print(f"ddp world={args.world} backend={args.backend} FAILED: " + "; ".join(errors), flush=True)
        sys.exit(1)
    r0 = results[0]
    print(f"ddp world={args.world} backend={args.backend} steps={args.steps} median_ms={r0[1]:.3f} "
          f"checksum={r0[2]:.9f} nccl={r0[3]}", flush=True)


if __name__ == "__main__":
    main()
