#!/usr/bin/env bash
# braid's AllReduce beside the peers (Open MPI vader and tcp, PyTorch Gloo), 2 ranks, float sum,
# interleaved in one run so the machine's drift hits everyone alike. Uses ../shared/peers (our own
# benchmark programs for the peers) and its median-of-repeats summarizer.
# Usage: perf/compare_peers.sh [reps] [outdir]      (ALLREDUCE_ARGS changes the sweep)
# Needs: openmpi-bin libopenmpi-dev python3-torch (see ../shared/peers/README.md) and a built tree.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
REPS=${1:-3}
OUT=${2:-$top/build/peers-$(date -u +%Y%m%dT%H%M%S)}
ARGS=${ALLREDUCE_ARGS:-"-b 8 -e 256M -f 2"}
BRAID_ITERS=${BRAID_ITERS:-"-n 100 -w 10"}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$top/../shared/peers" "$work/"
cd "$work/peers" && ./build.sh >/dev/null || { echo "building the peers failed"; exit 1; }
. ./lib_measure.sh
mkdir -p "$OUT"
OMPI="mpirun.openmpi --allow-run-as-root --mca pml ob1 -np 2"
BRAIDRUN="$top/build/tools/braidrun -n 2"
PERF="$top/build/perf/all_reduce_perf $ARGS $BRAID_ITERS -z 1"
for r in $(seq 1 "$REPS"); do
  measure "$OUT/braid_np2_shm.run$r.txt" $BRAIDRUN $PERF
  measure "$OUT/ompi_np2_vader.run$r.txt" $OMPI --mca btl self,vader ./build/allreduce_ompi $ARGS
  measure "$OUT/braid_np2_tcp.run$r.txt" env BRAID_TRANSPORTS=tcp $BRAIDRUN $PERF
  measure "$OUT/ompi_np2_tcp.run$r.txt" $OMPI --mca btl self,tcp ./build/allreduce_ompi $ARGS
  [ -z "${NO_GLOO:-}" ] && measure "$OUT/gloo_np2.run$r.txt" /usr/bin/python3 torch_gloo_allreduce_perf.py --np 2 $ARGS
done
python3 summarize.py "$OUT" | tee "$OUT/summary.md"
