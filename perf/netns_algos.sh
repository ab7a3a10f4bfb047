#!/usr/bin/env bash
# AllReduce across 4 network namespaces x 2 ranks with every host's link rate-limited (tc tbf, 1 Gbit/s by
# default): the flat ring, hierarchical and tree algorithms measured (BRAID_ALGO, interleaved, medians of
# the repeats) beside what `braid-topo --plan` predicts for the same cluster with the cost constants of
# the test bed, measured in the same run: the inter-host rate from a 2-host AllReduce at 64 MiB, the
# inter-host step from a 2-host send/recv of 8 bytes. Prints a markdown table with measured/predicted.
# Usage (root): perf/netns_algos.sh [reps] [outdir]
#   RATE=1gbit  HOSTS=4  RANKS=2  ALGOS="ring hierarchical tree"
#   COST_ENV="BRAID_COST_...=..."  extra or replaced cost constants for the prediction (a what-if)
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
REPS=${1:-3}
OUT=${2:-$top/build/netns-algos-$(date -u +%Y%m%dT%H%M%S)}
RATE=${RATE:-1gbit} HOSTS=${HOSTS:-4} RANKS=${RANKS:-2}
ALGOS=${ALGOS:-"ring hierarchical tree"}
run=("$top/tests/netns/run.sh")
perf=$top/build/perf
mkdir -p "$OUT"

# One run of PROGRAM on H hosts x N ranks, its rank-0 lines untagged, into FILE (appended).
bed() {
  local file=$1 h=$2 n=$3
  shift 3
  { echo "# loadavg $(cut -d' ' -f1-3 /proc/loadavg): run.sh $h $n --rate $RATE -- $*"
    "${run[@]}" "$h" "$n" --rate "$RATE" --timeout 600 -- "$@" 2>&1 | sed -n 's/^\[0\] //p'; } >>"$file"
}

for r in $(seq 1 "$REPS"); do
  echo "round $r of $REPS"
  bed "$OUT/alpha.txt" 2 1 "$perf/sendrecv_perf" -b 8 -e 8 -n 1000 -w 100 -z 1
  bed "$OUT/rate.txt" 2 1 "$perf/all_reduce_perf" -b 64M -e 64M -n 3 -w 1 -z 1 -A ring
  for a in $ALGOS; do
    # Many iterations where a call is short, few where it takes a second.
    bed "$OUT/$a.txt" "$HOSTS" "$RANKS" "$perf/all_reduce_perf" -b 16 -e 256K -f 4 -n 50 -w 5 -z 1 -A "$a"
    bed "$OUT/$a.txt" "$HOSTS" "$RANKS" "$perf/all_reduce_perf" -b 1M -e 64M -f 4 -n 3 -w 1 -z 1 -A "$a"
  done
done

# Medians of the out-of-place times (column 6, us) per size.
medians() {
  awk '!/^#/ && NF >= 13 && $1 ~ /^[0-9]+$/ {print $1, $6}' "$1" |
    sort -k1,1n -k2,2g | awk '{t[$1] = t[$1] " " $2} END {for (s in t) print s, t[s]}' |
    while read -r size times; do
      # shellcheck disable=SC2086  # one word per time
      set -- $times
      shift $(($# / 2))
      echo "$size $1"
    done | sort -n
}
alpha=$(medians "$OUT/alpha.txt" | awk '{print $2}')
# 2 ranks: busbw = algbw = S / t, and the ring moves S through the link each way: the payload rate.
gbps=$(medians "$OUT/rate.txt" | awk '{printf "%.4f", $1 / $2 / 1e3}')
cost=(BRAID_COST_INTER_ALPHA_US="$alpha" BRAID_COST_INTER_GBPS="$gbps")
# shellcheck disable=SC2206  # COST_ENV is a list of VAR=VALUE words
[ -n "${COST_ENV:-}" ] && cost+=($COST_ENV)
echo "# cost constants of the test bed: ${cost[*]}" | tee "$OUT/table.md"
# Two predictions: each rank with a link of its own (BRAID_COST_INTER_LINKS=0, the model before this
# test bed), and the host's ranks sharing its one link (=1, what the namespaces have).
for a in $ALGOS; do
  medians "$OUT/$a.txt" >"$OUT/$a.median"
  for links in 0 1; do
    env "${cost[@]}" BRAID_COST_INTER_LINKS=$links BRAID_ALGO="allreduce:$a" "$top/build/tools/braid-topo" --plan \
      --ranks $((HOSTS * RANKS)) --hosts "$HOSTS" >"$OUT/$a.links$links.plan"
  done
done
python3 - "$OUT" "$ALGOS" <<'PY' | tee -a "$OUT/table.md"
import sys
out, algos = sys.argv[1], sys.argv[2].split()
units = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
def plan(a, links):
    p = {}
    for line in open(f"{out}/{a}.links{links}.plan"):
        f = line.split()
        if len(f) >= 4 and f[1] in units:
            p[int(f[0]) * units[f[1]]] = float(f[3])
    return p
def human(n):
    for u in ("GiB", "MiB", "KiB"):
        if n >= units[u]:
            return f"{n // units[u]} {u}"
    return f"{n} B"
print("measured: median out-of-place time (us); own: predicted with a link per rank; shared: with the host's")
print("ranks sharing one link (BRAID_COST_INTER_LINKS=1); m/own, m/sh: measured / predicted\n")
for a in algos:
    meas = {int(s): float(t) for s, t in (l.split() for l in open(f"{out}/{a}.median"))}
    own, shared = plan(a, 0), plan(a, 1)
    print(f"\n**{a}**\n")
    print("| size | measured | own | m/own | shared | m/sh |")
    print("|---:|---:|---:|---:|---:|---:|")
    for s in sorted(meas):
        m, p0, p1 = meas[s], own.get(s), shared.get(s)
        print(f"| {human(s)} | {m:.0f} | {p0:.0f} | {m / p0:.2f} | {p1:.0f} | {m / p1:.2f} |")
PY
