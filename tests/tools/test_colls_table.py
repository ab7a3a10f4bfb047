#!/usr/bin/env python3
"""perf/colls_table.py on made-up runs: the ratio of the medians, the ratio of the best rounds, and the
behind list that sorts points behind by both from points behind by one only.

Usage: test_colls_table.py path/to/perf/colls_table.py
Three rounds of a 2-rank shm AllGather and Broadcast at two sizes, times chosen so that each case of
the list occurs once:
  AllGather 1 KiB: braid behind in every round (medians 0.50, best 0.50)          -> behind by both
  AllGather 4 KiB: braid's median round is a slow one, its best ahead (0.50, 2.00) -> by one only
  Broadcast 1 KiB: in place ahead, out of place behind                            -> not behind
  Broadcast 4 KiB: in place behind in the best rounds only (3.64, 0.80)            -> by one only
"""
import os
import subprocess
import sys
import tempfile

NCCL_HEAD = "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"


def braid_row(size, out_us, in_us):
    return f"{size:>12} {size // 4:>13} float sum -1 {out_us:.2f} 1.00 1.00 0 {in_us:.2f} 1.00 1.00 0\n"


def ompi_row(size, us):
    return f"{size:>12} {us:10.2f} 1.000 1.000\n"


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def main():
    script = sys.argv[1]
    # size -> per round (braid out of place, braid in place, Open MPI)
    allgather = {1024: [(20, 20, 10), (22, 22, 11), (24, 24, 12)], 4096: [(40, 40, 20), (10, 10, 20), (45, 45, 20)]}
    bcast = {1024: [(40, 10, 20), (40, 10, 20), (40, 10, 20)], 4096: [(10, 10, 8), (12, 12, 40), (11, 11, 40)]}
    with tempfile.TemporaryDirectory() as d:
        for coll, table in (("allgather", allgather), ("bcast", bcast)):
            for r in range(3):
                write(os.path.join(d, f"braid_np2_shm_{coll}.run{r + 1}.txt"),
                      NCCL_HEAD + "".join(braid_row(s, v[r][0], v[r][1]) for s, v in table.items()))
                write(os.path.join(d, f"ompi_np2_shm_{coll}.run{r + 1}.txt"),
                      "# coll\n" + "".join(ompi_row(s, v[r][2]) for s, v in table.items()))
        out = subprocess.run([sys.executable, script, d, "2", "shm", "allgather bcast"], check=True,
                             capture_output=True, text=True).stdout
    expect = [
        "| 1 KiB | 22.00 | 11.00 | 0.50 | 0.50 |",
        "| 4 KiB | 40.00 | 20.00 | 0.50 | 2.00 |",
        "braid behind Open MPI at 1 points by the medians and by the best rounds:\n"
        "- allgather 2 ranks shm 1 KiB: 0.50, best rounds 0.50\n"
        "and at 2 more by one of them only:\n"
        "- allgather 2 ranks shm 4 KiB: 0.50, best rounds 2.00\n"
        "- bcast 2 ranks shm 4 KiB in place: 3.64, best rounds 0.80\n",
    ]
    missing = [e for e in expect if e not in out]
    if missing:
        print(out)
        print("missing from the output above:\n" + "\n".join(missing))
        return 1
    print("colls_table: medians, best rounds and the behind list as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
