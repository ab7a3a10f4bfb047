#!/usr/bin/env bash
# Every collective of braid beside Open MPI's, on one host: AllReduce, AllGather, ReduceScatter,
# AllToAll, Broadcast and Reduce (float, sum, root 0, out of place), 2 and 4 ranks, over shared memory
# (braid shm / Open MPI vader) and TCP on loopback (braid tcp / Open MPI btl tcp), interleaved in one
# run so the machine's drift hits everyone alike, and the 2-rank AllReduce limit of the machine
# (../shared/peers/limits/ideal_allreduce.c) once per round. Sizes and bus bandwidths follow
# nccl-tests on both sides (../shared/peers/mpi_coll_perf.c says how). Prints one table per ranks x
# transport x collective with the median times, Open MPI's time / braid's (> 1: braid is faster) by
# the medians and by each side's best round, and, for the 2-rank AllReduce, braid's busbw as a share
# of the limit; perf/colls_table.py does that.
# Usage: perf/compare_colls.sh [reps] [outdir]
#   NPS="2 4"  TRANSPORTS="shm tcp"  COLLS="allreduce allgather reducescatter alltoall bcast reduce"
#   SIZES="-b 16 -e 256M -f 4"  BRAID_ITERS="-B 1G"  OMPI_ITERS=""  (Open MPI's programs pick
#   their iterations per size from a byte budget: min(1000, max(5, 1 GiB / size)), a tenth of that
#   (at least 5) to warm up; braid's -B 1G does the same, so both sides average as many calls at every
#   size. A fixed BRAID_ITERS="-n 5 -w 2" averaged 5 calls where Open MPI averaged 64-1000 at 1-16
#   MiB: perf/results/2026-12-06-iterations.md. OMPI_ITERS="-n 50 -w 5" caps the AllReduce
#   program's; the other collectives' program (../shared/peers/mpi_coll_perf.c) reads no -n or -w
#   and ignores them)  NO_LIMIT=1 leaves the limit program out
#   BUILD=/path/to/build (default: this checkout's build/) is the braid measured;
#   BASELINE=/path/to/other/build (a build folder of another braid commit, with its perf/ and
#   tools/braidrun) runs that build too, right before this one each time: the table then shows the
#   baseline's times and this build's speedup over it, measured in the same run
#   BRAID_ARGS / BASELINE_ARGS: more flags for this build's / the baseline's programs, e.g.
#   BASELINE=build BRAID_ARGS="-R 1": one build, its FIFO path beside its path in place on
#   braidMemAlloc memory
#   BRAID_ENV / BASELINE_ENV: settings (NAME=value words) for this build's / the baseline's runs,
#   e.g. BASELINE=build BASELINE_ENV="BRAID_SHM_CMA_SPEED=0": one build with and without a setting
#   PAIRED=1: each size a run of its own, braid's (and the baseline's) and Open MPI's back to back,
#   who goes first swapped every round, so that a pair is a second apart where a sweep of every
#   size puts up to a minute between them; costs a program start per size and side (0.1-0.3 s
#   here). On this VM it did not shorten the list of points behind over tcp (30 of 156 against 33
#   swept: its states change within a second too; perf/results/2026-12-06-standing-tcp-41.md).
#   SIZES must be "-b MIN -e MAX -f FACTOR" then.
# Needs: openmpi-bin libopenmpi-dev (see ../shared/peers/README.md) and a built tree (build/).
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
REPS=${1:-3}
OUT=${2:-$top/build/colls-$(date -u +%Y%m%dT%H%M%S)}
NPS=${NPS:-"2 4"}
TRANSPORTS=${TRANSPORTS:-"shm tcp"}
COLLS=${COLLS:-"allreduce allgather reducescatter alltoall bcast reduce"}
SIZES=${SIZES:-"-b 16 -e 256M -f 4"}
BRAID_ITERS=${BRAID_ITERS:-"-B 1G"}
OMPI_ITERS=${OMPI_ITERS:-}
BUILD=${BUILD:-$top/build}
# Folders given relative are the caller's: resolve them before peers_env.sh moves into its copy of
# the peers (a relative BASELINE used to measure nothing, its runs failing with rc 127).
BUILD=$(cd "$BUILD" && pwd) || { echo "compare_colls.sh: no build folder $BUILD" >&2; exit 2; }
if [ -n "${BASELINE:-}" ]; then
  BASELINE=$(cd "$BASELINE" && pwd) || { echo "compare_colls.sh: no baseline folder $BASELINE" >&2; exit 2; }
fi
. "$top/perf/peers_env.sh"

# braid's *_perf program for a collective, and Open MPI's program and its -c name.
braid_prog() {
  case $1 in
    allreduce) echo all_reduce_perf ;; allgather) echo all_gather_perf ;;
    reducescatter) echo reduce_scatter_perf ;; alltoall) echo alltoall_perf ;;
    bcast) echo broadcast_perf ;; reduce) echo reduce_perf ;;
    *) echo "compare_colls.sh: unknown collective '$1'" >&2; exit 2 ;;
  esac
}
ompi_prog() {
  if [ "$1" = allreduce ]; then echo ./build/allreduce_ompi; else echo "./build/coll_ompi -c $1"; fi
}
btl() { if [ "$1" = shm ]; then echo self,vader; else echo self,tcp; fi; }

# The sizes of "-b MIN -e MAX -f FACTOR" (K, M, G suffixes), one per line.
size_list() {
  python3 - "$@" <<'PY'
import sys
a = dict(zip(sys.argv[1::2], sys.argv[2::2]))
num = lambda t: int(t[:-1]) << {"K": 10, "M": 20, "G": 30}[t[-1].upper()] if t[-1].isalpha() else int(t)
if set(a) != {"-b", "-e", "-f"} or int(a["-f"]) < 2:
    sys.exit("compare_colls.sh: PAIRED=1 takes SIZES of the form -b MIN -e MAX -f FACTOR (FACTOR >= 2)")
s, e = num(a["-b"]), num(a["-e"])
while s <= e:
    print(s)
    s *= int(a["-f"])
PY
}

# One side's run of ranks $1, transport $2, collective $3 in round $4, over the sizes in the rest.
# A braid build's: file prefix, build folder, settings and flags (words) first.
run_build() {
  local who=$1 build=$2 envs=$3 args=$4 np=$5 t=$6 c=$7 r=$8
  shift 8
  # shellcheck disable=SC2086  # the argument lists are words
  measure "$OUT/${who}_np${np}_${t}_$c.run$r.txt" env BRAID_TRANSPORTS="$t" $envs \
    "$build/tools/braidrun" -n "$np" "$build/perf/$(braid_prog "$c")" "$@" $BRAID_ITERS $args -z 1
}
run_base() { run_build base "$BASELINE" "${BASELINE_ENV:-}" "${BASELINE_ARGS:-}" "$@"; }
run_braid() { run_build braid "$BUILD" "${BRAID_ENV:-}" "${BRAID_ARGS:-}" "$@"; }
run_ompi() {
  local np=$1 t=$2 c=$3 r=$4
  shift 4
  # shellcheck disable=SC2086,SC2046
  measure "$OUT/ompi_np${np}_${t}_$c.run$r.txt" mpirun.openmpi --allow-run-as-root --mca pml ob1 \
    --mca btl "$(btl "$t")" -np "$np" --oversubscribe $(ompi_prog "$c") "$@" $OMPI_ITERS
}

if [ -n "${PAIRED:-}" ]; then
  # shellcheck disable=SC2086  # SIZES is words
  sizes=$(size_list $SIZES) || exit 2
fi
for r in $(seq 1 "$REPS"); do
  echo "round $r of $REPS"
  [ -z "${NO_LIMIT:-}" ] && measure "$OUT/limit.run$r.txt" ./build/ideal 3
  for np in $NPS; do
    for t in $TRANSPORTS; do
      for c in $COLLS; do
        if [ -z "${PAIRED:-}" ]; then
          # shellcheck disable=SC2086  # SIZES is words
          [ -z "${BASELINE:-}" ] || run_base "$np" "$t" "$c" "$r" $SIZES
          # shellcheck disable=SC2086
          run_braid "$np" "$t" "$c" "$r" $SIZES
          # shellcheck disable=SC2086
          run_ompi "$np" "$t" "$c" "$r" $SIZES
          continue
        fi
        sides="base braid ompi"
        [ $((r % 2)) = 0 ] && sides="ompi braid base"
        for s in $sizes; do
          for side in $sides; do
            [ "$side" = base ] && [ -z "${BASELINE:-}" ] && continue
            "run_$side" "$np" "$t" "$c" "$r" -b "$s" -e "$s"
          done
        done
      done
    done
  done
done
python3 "$top/perf/colls_table.py" "$OUT" "$NPS" "$TRANSPORTS" "$COLLS" | tee "$OUT/summary.md"
