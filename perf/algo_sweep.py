#!/usr/bin/env python3
"""Every AllReduce algorithm side by side, beside what the selector picks.

For each layout (ranks, emulated hosts) and repetition, runs all_reduce_perf once per algorithm
(BRAID_ALGO through -A) and once with the selector's own choice, interleaved so that drift on a
shared machine hits every algorithm alike; takes the median time per size; and asks braid-topo
--plan which algorithm the selector picks at each size for that layout (the same code the library
runs at init). Prints one markdown table per layout: busbw (GB/s, out of place) per algorithm, the
pick, and the pick's busbw over the best measured one.

  perf/algo_sweep.py --build build --layouts 2:1,4:1,8:1,4:2 --reps 3 > table.md
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ALGOS = ["ring", "tree", "rabenseifner", "recursive_doubling", "hierarchical"]


def run_perf(build, n, hosts, algo, args, env):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
        path = tmp.name
    cmd = [os.path.join(build, "tools", "braidrun"), "-n", str(n)]
    if hosts > 1:
        cmd += ["--hosts", str(hosts)]
    cmd += [os.path.join(build, "perf", "all_reduce_perf"), "-b", args.begin, "-e", args.end, "-f", str(args.factor),
            "-n", str(args.iters), "-w", str(args.warmup), "-J", path]
    if algo != "auto":
        cmd += ["-A", algo]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=1200)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout)
        raise SystemExit(f"{' '.join(cmd)} failed with {proc.returncode}")
    with open(path) as f:
        data = json.load(f)
    os.unlink(path)
    if data.get("wrong_total", 0):
        raise SystemExit(f"{algo} on {n} ranks gave wrong results")
    return {r["size"]: r["oop_time_us"] for r in data["results"]}


def size_bytes(text):
    num, unit = text.split()
    return int(num) * {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit]


def picks(build, n, hosts, env):
    cmd = [os.path.join(build, "tools", "braid-topo"), "--plan", "--ranks", str(n), "--hosts", str(hosts)]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True, env=env).stdout
    table = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\d+ (?:B|KiB|MiB|GiB))\s+(\S+)\s+([\d.]+)", line)
        if m:
            table[size_bytes(m.group(1))] = (m.group(2), float(m.group(3)))
    return table


def human(b):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div and b % div == 0:
            return f"{b // div} {unit}"
    return f"{b} B"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--layouts", default="2:1,4:1,8:1,4:2", help="ranks:hosts,...")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("-b", dest="begin", default="8")
    ap.add_argument("-e", dest="end", default="64M")
    ap.add_argument("-f", dest="factor", type=int, default=4)
    ap.add_argument("-n", dest="iters", type=int, default=10)
    ap.add_argument("-w", dest="warmup", type=int, default=3)
    ap.add_argument("--save", help="write the raw timings (JSON) here")
    ap.add_argument("--load", help="use raw timings saved earlier instead of measuring (re-evaluates the picks)")
    args = ap.parse_args()
    saved = {}
    if args.load:
        with open(args.load) as f:
            saved = json.load(f)
    env = dict(os.environ)
    verdicts = []
    for layout in args.layouts.split(","):
        n, hosts = (int(x) for x in layout.split(":"))
        algos = [a for a in ALGOS if a != "hierarchical" or hosts > 1] + ["auto"]
        times = {a: {} for a in algos}
        if layout in saved:
            times = {a: {int(k): v for k, v in d.items()} for a, d in saved[layout].items()}
        else:
            for _ in range(args.reps):
                for a in algos:
                    for size, t in run_perf(args.build, n, hosts, a, args, env).items():
                        times[a].setdefault(size, []).append(t)
            saved[layout] = times
            if args.save:
                with open(args.save, "w") as f:
                    json.dump(saved, f)
        pick = picks(args.build, n, hosts, env)
        reps = len(next(iter(times["ring"].values())))
        print(f"\n### {n} ranks, {hosts} host{'s' if hosts > 1 else ''} (busbw GB/s, out of place, median of {reps})\n")
        print("| size | " + " | ".join(algos) + " | selector pick | pick / best |")
        print("|---:|" + "---:|" * len(algos) + "---|---:|")
        factor = 2.0 * (n - 1) / n
        for size in sorted(times["ring"]):
            bw = {}
            for a in algos:
                t = statistics.median(times[a][size])
                bw[a] = size / (t * 1e3) * factor if t > 0 else 0.0
            measured = [a for a in algos if a != "auto"]
            best = max(measured, key=lambda a: bw[a])
            p = pick.get(size, ("?", 0))[0]
            ratio = bw.get(p, 0.0) / bw[best] if bw[best] > 0 else 1.0
            verdicts.append((layout, size, p, best, ratio))
            cells = " | ".join(f"**{bw[a]:.3f}**" if a == best else f"{bw[a]:.3f}" for a in algos)
            print(f"| {human(size)} | {cells} | {p} | {ratio:.2f} |")
    misses = [v for v in verdicts if v[4] < 0.9]
    print(f"\nselector within 10% of the best measured algorithm at {len(verdicts) - len(misses)} of {len(verdicts)} points")
    for layout, size, p, best, ratio in misses:
        print(f"- {layout} {human(size)}: picked {p}, best {best} ({ratio:.2f})")


if __name__ == "__main__":
    main()
