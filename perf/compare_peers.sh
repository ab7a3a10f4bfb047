#!/usr/bin/env bash
# braid's AllReduce beside the peers (Open MPI vader and tcp, PyTorch Gloo), 2 ranks, float sum,
# interleaved in one run so the machine's drift hits everyone alike. Uses ../shared/peers (our own
# benchmark programs for the peers) and its median-of-repeats summarizer.
# Usage: perf/compare_peers.sh [reps] [outdir]      (ALLREDUCE_ARGS changes the sweep)
#   NP=4          ranks (default 2)
#   BASELINE=DIR  also runs braid from another build folder (an older commit's), labelled braid_base:
#                 before and after a change, interleaved with everything else
#   NO_TCP=1, NO_GLOO=1, NO_MPI=1  leave those configurations out
# Needs: openmpi-bin libopenmpi-dev python3-torch (see ../shared/peers/README.md) and a built tree.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
REPS=${1:-3}
OUT=${2:-$top/build/peers-$(date -u +%Y%m%dT%H%M%S)}
ARGS=${ALLREDUCE_ARGS:-"-b 8 -e 256M -f 2"}
BRAID_ITERS=${BRAID_ITERS:-"-n 100 -w 10"}
. "$top/perf/peers_env.sh"
NP=${NP:-2}
OMPI="mpirun.openmpi --allow-run-as-root --mca pml ob1 -np $NP --oversubscribe"
# braid from build folder $1, labelled $2, over transport $3
braid_run() {
  measure "$OUT/$2_np${NP}_$3.run$r.txt" env BRAID_TRANSPORTS="$3" "$1/tools/braidrun" -n "$NP" \
    "$1/perf/all_reduce_perf" $ARGS $BRAID_ITERS -z 1
}
for r in $(seq 1 "$REPS"); do
  braid_run "$top/build" braid shm
  [ -n "${BASELINE:-}" ] && braid_run "$BASELINE" braid_base shm
  [ -z "${NO_MPI:-}" ] && measure "$OUT/ompi_np${NP}_vader.run$r.txt" $OMPI --mca btl self,vader ./build/allreduce_ompi $ARGS
  if [ -z "${NO_TCP:-}" ]; then
    braid_run "$top/build" braid tcp
    [ -n "${BASELINE:-}" ] && braid_run "$BASELINE" braid_base tcp
    [ -z "${NO_MPI:-}" ] && measure "$OUT/ompi_np${NP}_tcp.run$r.txt" $OMPI --mca btl self,tcp ./build/allreduce_ompi $ARGS
  fi
  [ -z "${NO_GLOO:-}" ] && measure "$OUT/gloo_np${NP}.run$r.txt" /usr/bin/python3 torch_gloo_allreduce_perf.py --np "$NP" $ARGS
done
# Every configuration that ran, braid's too (summarize.py alone picks only the peers').
cfgs=$(cd "$OUT" && ls *.run*.txt | sed 's/\.run[0-9]*\.txt$//' | sort -u)
python3 summarize.py "$OUT" $cfgs | tee "$OUT/summary.md"
