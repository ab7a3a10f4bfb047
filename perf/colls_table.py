#!/usr/bin/env python3
"""Tables of perf/compare_colls.sh: braid beside Open MPI per ranks x transport x collective.

Usage: perf/colls_table.py OUTDIR "NPS" "TRANSPORTS" "COLLS"
Reads OUTDIR/{braid,ompi}_np<N>_<transport>_<coll>.run<R>.txt and OUTDIR/limit.run<R>.txt. Per size
it prints the median out-of-place time of each side over the rounds, Open MPI's / braid's (> 1: braid
is faster; the ratio of the medians), the median busbw of each, and for the 2-rank AllReduce braid's
busbw over the limit's (the better of its plain and non-temporal stores, median over the rounds).
Beside that ratio, the ratio of each side's best round ("best", min over the rounds): this VM moves
between a fast and a slow state for seconds at a time, so in a run of 3-5 rounds one side's median can
be a slow-state round where the other's is a fast one; the best rounds are each side's fast state.
Sizes that only one side measured are left out. Closes with the sizes where braid is behind by the
medians or by the best rounds, those behind by both first: a point behind by one only is as likely
the machine as braid.
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


def over_rounds(runs, stat=statistics.median):
    """size -> stat over the rounds (parsed files) of each column (median by default; min gives the best round)."""
    sizes = set().union(*[r.keys() for r in runs]) if runs else set()
    out = {}
    for s in sizes:
        vals = [r[s] for r in runs if s in r]
        if isinstance(vals[0], tuple):
            out[s] = tuple(stat(v[i] for v in vals) for i in range(len(vals[0])))
        else:
            out[s] = stat(vals)
    return out


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
    limit = over_rounds([limit_rows(f) for f in runs_of(d, "limit")])
    behind = []
    for np in nps:
        for t in transports:
            for c in colls:
                name = f"np{np}_{t}_{c}"
                braid_runs = [rows(f) for f in runs_of(d, "braid_" + name)]
                ompi_runs = [rows(f) for f in runs_of(d, "ompi_" + name)]
                o, omin = over_rounds(ompi_runs), over_rounds(ompi_runs, min)
                b = nominal(over_rounds(braid_runs), o.keys(), int(np))
                bmin = nominal(over_rounds(braid_runs, min), o.keys(), int(np))
                if not b or not o:
                    print(f"### {c}, {np} ranks, {t}\n\n(no data: braid {len(b)} sizes, Open MPI {len(o)})\n")
                    continue
                share = c == "allreduce" and np == "2" and limit
                nruns = len(braid_runs)
                print(f"### {c}, {np} ranks, {t} (medians of {nruns} rounds; Open MPI {'vader' if t == 'shm' else 'tcp'})\n")
                base = nominal(over_rounds([rows(f) for f in runs_of(d, "base_" + name)]), o.keys(), int(np))
                inplace = c == "bcast"
                head = "| size | braid us | Open MPI us | OMPI/braid | best rounds | braid busbw | OMPI busbw |"
                rule = "|---:|---:|---:|---:|---:|---:|---:|"
                if inplace:  # the best rounds' column compares the in-place call, as the behind list does
                    head = head.replace("best rounds", "best rounds in place")
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
                    bbest = bmin[s][2 if inplace else 0]  # the call that does MPI_Bcast's work: in place
                    best = omin[s][0] / bbest if bbest > 0 else float("nan")
                    line = f"| {human(s)} | {bt:.2f} | {ot:.2f} | {ratio:.2f} | {best:.2f} | {bb:.3f} | {ob:.3f} |"
                    if inplace:
                        ratio = ot / bi if bi > 0 else float("nan")
                        line += f" {bi:.2f} | {ratio:.2f} |"
                    if base:
                        line += f" {base[s][0]:.2f} | {base[s][0] / bt:.2f} |" if s in base and bt > 0 else " | |"
                    if share:
                        line += f" {bb / limit[s]:.2f} |" if limit.get(s) else " |"
                    print(line)
                    if ratio < 1 or best < 1:
                        where = f"{c} {np} ranks {t} {human(s)}" + (" in place" if inplace else "")
                        behind.append((ratio < 1 and best < 1, f"{where}: {ratio:.2f}, best rounds {best:.2f}"))
                print()
    both = [text for by_both, text in behind if by_both]
    one = [text for by_both, text in behind if not by_both]
    print(f"braid behind Open MPI at {len(both)} points by the medians and by the best rounds" + (":" if both else ""))
    for text in both:
        print(f"- {text}")
    print(f"and at {len(one)} more by one of them only" + (":" if one else ""))
    for text in one:
        print(f"- {text}")


if __name__ == "__main__":
    main()
