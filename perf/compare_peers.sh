#!/usr/bin/env bash
# braid's AllReduce beside the peers (Open MPI vader and tcp, PyTorch Gloo), 2 ranks, float sum,
# interleaved in one run so the machine's drift hits everyone alike. Uses ../shared/peers (our own
# benchmark programs for the peers) and its median-of-repeats summarizer.
# Usage: perf/compare_peers.sh [reps] [outdir]      (ALLREDUCE_ARGS changes the sweep)
#   NP=4          ranks (default 2)
#   BASELINE=DIR  also runs braid from another build folder (an older commit's), labelled braid_base:
#                 before and after a change, interleaved with everything else
#   NSOCKS="1 4"  braid tcp once per BRAID_NSOCKS value, labelled braid_ns<N> (default: one run, labelled
#                 braid, with the environment's setting); BASELINE runs once, as before
#   OMPI_ITERS    arguments for Open MPI's program (e.g. "-n 100 -w 10")
#   UCX=1         also braid's ucx transport and Open MPI's pml ucx, both over UCX's tcp on loopback
#                 (UCX_TLS=tcp,self UCX_NET_DEVICES=lo), labelled braid_np2_ucx and ompi_np2_ucx
#   NO_SHM=1, NO_TCP=1, NO_GLOO=1, NO_MPI=1  leave those configurations out
# Needs: openmpi-bin libopenmpi-dev python3-torch (see ../shared/peers/README.md) and a built tree.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
REPS=${1:-3}
OUT=${2:-$top/build/peers-$(date -u +%Y%m%dT%H%M%S)}
ARGS=${ALLREDUCE_ARGS:-"-b 8 -e 256M -f 2"}
BRAID_ITERS=${BRAID_ITERS:-"-n 100 -w 10"}
# Open MPI's own iteration count (its program picks up to 1000 per size within a byte budget); on a
# loaded machine OMPI_ITERS="-n 100 -w 10" keeps its runs as short as braid's.
OMPI_ITERS=${OMPI_ITERS:-}
. "$top/perf/peers_env.sh"
NP=${NP:-2}
OMPI="mpirun.openmpi --allow-run-as-root --mca pml ob1 -np $NP --oversubscribe"
# braid from build folder $1, labelled $2, over transport $3, with more environment in $4...
braid_run() {
  local dir=$1 label=$2 transport=$3
  shift 3
  measure "$OUT/${label}_np${NP}_${transport}.run$r.txt" env BRAID_TRANSPORTS="$transport" "$@" \
    "$dir/tools/braidrun" -n "$NP" "$dir/perf/all_reduce_perf" $ARGS $BRAID_ITERS -z 1
}
# braid tcp from build folder $1, labelled $2: once per NSOCKS value when NSOCKS is set.
braid_tcp() {
  if [ -z "${NSOCKS:-}" ]; then
    braid_run "$1" "$2" tcp
    return
  fi
  for ns in $NSOCKS; do braid_run "$1" "$2_ns$ns" tcp BRAID_NSOCKS="$ns"; done
}
for r in $(seq 1 "$REPS"); do
  if [ -z "${NO_SHM:-}" ]; then
    braid_run "$top/build" braid shm
    [ -n "${BASELINE:-}" ] && braid_run "$BASELINE" braid_base shm
    [ -z "${NO_MPI:-}" ] && measure "$OUT/ompi_np${NP}_vader.run$r.txt" $OMPI --mca btl self,vader ./build/allreduce_ompi $ARGS $OMPI_ITERS
  fi
  if [ -z "${NO_TCP:-}" ]; then
    braid_tcp "$top/build" braid
    # An older build knows no BRAID_NSOCKS: it runs once, with its one socket.
    [ -n "${BASELINE:-}" ] && braid_run "$BASELINE" braid_base tcp
    [ -z "${NO_MPI:-}" ] && measure "$OUT/ompi_np${NP}_tcp.run$r.txt" $OMPI --mca btl self,tcp ./build/allreduce_ompi $ARGS $OMPI_ITERS
  fi
  if [ -n "${UCX:-}" ]; then
    braid_run "$top/build" braid ucx UCX_TLS=tcp,self UCX_NET_DEVICES=lo
    [ -z "${NO_MPI:-}" ] && measure "$OUT/ompi_np${NP}_ucx.run$r.txt" mpirun.openmpi --allow-run-as-root --mca pml ucx \
      --mca pml_ucx_tls any --mca pml_ucx_devices any \
      -x UCX_TLS=tcp,self -x UCX_NET_DEVICES=lo -np "$NP" --oversubscribe ./build/allreduce_ompi $ARGS $OMPI_ITERS
  fi
  [ -z "${NO_GLOO:-}" ] && measure "$OUT/gloo_np${NP}.run$r.txt" /usr/bin/python3 torch_gloo_allreduce_perf.py --np "$NP" $ARGS
done
# Every configuration that ran, braid's too (summarize.py alone picks only the peers').
cfgs=$(cd "$OUT" && ls *.run*.txt | sed 's/\.run[0-9]*\.txt$//' | sort -u)
python3 summarize.py "$OUT" $cfgs | tee "$OUT/summary.md"
