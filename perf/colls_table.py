#!/usr/bin/env python3
"""Tables of perf/compare_colls.sh: braid beside Open MPI per ranks x transport x collective.

Usage: perf/colls_table.py OUTDIR "NPS" "TRANSPORTS" "COLLS"
Reads OUTDIR/{braid,ompi}_np<N>_<transport>_<coll>.run<R>.txt and OUTDIR/limit.run<R>.txt. Per size
it prints the median out-of-place time of each side over the rounds, Open MPI's / braid's (> 1: braid
is faster; the ratio of the medians), the median busbw of each, and for the 2-rank AllReduce braid's
busbw over the limit's (the better of its plain and non-temporal stores, median over the rounds).
Sizes that only one side measured are left out. Closes with the sizes where braid is behind.
Broadcast also gets braid's in-place time: MPI_Bcast has one buffer, so it is the in-place call that
does the same work (out of place, braid's root also copies its input into its output); its
"behind" entries compare that one, and say so.
With OUTDIR/base_*.run<R>.txt (compare_colls.sh's BASELINE) it adds the baseline build's median time
and this build's speedup over it (> 1: this build is faster).
"""
import glob
import os
import re
import statistics
import sys


def rows(path):
    """size -> (out-of-place time us, busbw GB/s, in-place time us) from either side's output (Open
    MPI's programs: the in-place time is the out-of-place one)."""
    out = {}
    for line in open(path):
        f = line.split()
        if line.startswith("#") or not f or not f[0].isdigit():
            continue
        if len(f) == 13:  # nccl-tests' columns: braid's *_perf and allreduce_ompi
            out[int(f[0])] = (float(f[5]), float(f[7]), float(f[9]))
        elif len(f) == 4:  # coll_ompi: size time algbw busbw
            out[int(f[0])] = (float(f[1]), float(f[3]), float(f[1]))
    return out


def limit_rows(path):
    out = {}
    for line in open(path):
        f = line.split()
        if len(f) == 3 and f[0].isdigit():
            out[int(f[0])] = max(float(f[1]), float(f[2]))
    return out


def medians(files, parse):
    runs = [parse(f) for f in files]
    sizes = set().union(*[r.keys() for r in runs]) if runs else set()
    med = {}
    for s in sizes:
        vals = [r[s] for r in runs if s in r]
        if isinstance(vals[0], tuple):
            med[s] = tuple(statistics.median(v[i] for v in vals) for i in range(len(vals[0])))
        else:
            med[s] = statistics.median(vals)
    return med


def nominal(side, sizes, nranks):
    """braid's rows keyed by Open MPI's sizes: braid's *_perf round a size down to whole elements per
    rank (nccl-tests' convention), Open MPI's program prints the size it was asked for; with 3 ranks
    the two never agree exactly. A braid size within 8 x nranks bytes below a requested one is that
    one."""
    out = {}
    for s in sizes:
        near = [b for b in side if s - 8 * nranks < b <= s]
        if near:
            out[s] = side[max(near)]
    return out


def human(n):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n // div} {unit}"
    return f"{n} B"


def runs_of(d, name):
    return sorted(glob.glob(os.path.join(d, name + ".run*.txt")), key=lambda p: int(re.findall(r"run(\d+)", p)[-1]))


def main():
    d, nps, transports, colls = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4].split()
    limit = medians(runs_of(d, "limit"), limit_rows)
    behind = []
    for np in nps:
        for t in transports:
            for c in colls:
                name = f"np{np}_{t}_{c}"
                b, o = medians(runs_of(d, "braid_" + name), rows), medians(runs_of(d, "ompi_" + name), rows)
                b = nominal(b, o.keys(), int(np))
                if not b or not o:
                    print(f"### {c}, {np} ranks, {t}\n\n(no data: braid {len(b)} sizes, Open MPI {len(o)})\n")
                    continue
                share = c == "allreduce" and np == "2" and limit
                nruns = len(runs_of(d, "braid_" + name))
                print(f"### {c}, {np} ranks, {t} (medians of {nruns} rounds; Open MPI {'vader' if t == 'shm' else 'tcp'})\n")
                base = nominal(medians(runs_of(d, "base_" + name), rows), o.keys(), int(np))
                head = "| size | braid us | Open MPI us | OMPI/braid | braid busbw | OMPI busbw |"
                rule = "|---:|---:|---:|---:|---:|---:|"
                inplace = c == "bcast"
                if inplace:
                    head += " braid in place us | OMPI/braid in place |"
                    rule += "---:|---:|"
                if base:
                    head += " baseline us | baseline/braid |"
                    rule += "---:|---:|"
                if share:
                    head += " braid/limit |"
                    rule += "---:|"
                print(head)
                print(rule)
                for s in sorted(set(b) & set(o)):
                    (bt, bb, bi), (ot, ob, _) = b[s], o[s]
                    ratio = ot / bt if bt > 0 else float("nan")
                    line = f"| {human(s)} | {bt:.2f} | {ot:.2f} | {ratio:.2f} | {bb:.3f} | {ob:.3f} |"
                    if inplace:
                        ratio = ot / bi if bi > 0 else float("nan")  # the call that does MPI_Bcast's work
                        line += f" {bi:.2f} | {ratio:.2f} |"
                    if base:
                        line += f" {base[s][0]:.2f} | {base[s][0] / bt:.2f} |" if s in base and bt > 0 else " | |"
                    if share:
                        line += f" {bb / limit[s]:.2f} |" if limit.get(s) else " |"
                    print(line)
                    if ratio < 1:
                        behind.append(f"{c} {np} ranks {t} {human(s)}: {ratio:.2f}" + (" (in place)" if inplace else ""))
                print()
    print(f"braid behind Open MPI at {len(behind)} points" + (":" if behind else ""))
    for b in behind:
        print(f"- {b}")


if __name__ == "__main__":
    main()
