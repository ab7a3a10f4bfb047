#!/usr/bin/env bash
# AllReduce (float sum, 16 B - 256 MiB) across 2 network namespaces x 1 rank over veth
# (tests/netns/run.sh): braid over tcp beside Open MPI's tcp BTL and PyTorch's Gloo, interleaved in one run
# so the machine's drift hits everyone alike; the median-of-repeats table of ../shared/peers/summarize.py.
# Usage (root): perf/netns_peers.sh [reps] [outdir]
#   RATE=1gbit   rate-limit every host's link (tc tbf)      NO_MPI=1, NO_GLOO=1  leave those out
#   ALLREDUCE_ARGS (default "-b 16 -e 256M -f 4")
#   PEER_ITERS: the peers' iteration flags (default "-n 200 -m 3 -w 2 -B 256M": iters = clamp(256 MiB /
#   size, 3, 200)); braid runs 100 iterations up to 1 MiB and 4 beyond (BRAID_SMALL, BRAID_LARGE)
# Open MPI crosses namespaces with one mpirun in host 0's namespace whose rsh agent (perf/netns_rsh.sh)
# starts the other host's daemon inside that host's namespace.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
self=$top/perf/$(basename "$0")
ARGS=${ALLREDUCE_ARGS:-"-b 16 -e 256M -f 4"}
PEER_ITERS=${PEER_ITERS:-"-n 200 -m 3 -w 2 -B 256M"}
BRAID_SMALL=${BRAID_SMALL:-"-n 100 -w 10"}
BRAID_LARGE=${BRAID_LARGE:-"-n 4 -w 1"}
RUN=("$top/tests/netns/run.sh" 2 1)
[ -n "${RATE:-}" ] && RUN+=(--rate "$RATE")
# braid's all_reduce_perf runs a fixed count per size, the peers a byte budget: two braid sweeps come
# close, many iterations up to 1 MiB and few beyond. All print the same columns.
min=$(echo "$ARGS" | sed -n 's/.*-b \([^ ]*\).*/\1/p')
max=$(echo "$ARGS" | sed -n 's/.*-e \([^ ]*\).*/\1/p')
factor=$(echo "$ARGS" | sed -n 's/.*-f \([^ ]*\).*/\1/p')
big=$(( (1 << 20) * factor ))  # the first size past 1 MiB when min is a power of factor from 16 B
# (run.sh tags each line with its rank: "[0] "; summarize.py wants the bare columns.)
braid() {
  {
    # shellcheck disable=SC2086  # the iteration flags are words
    BRAID_TRANSPORTS=tcp "${RUN[@]}" -- "$top/build/perf/all_reduce_perf" -b "$min" -e 1M -f "$factor" $BRAID_SMALL -z 1 &&
      BRAID_TRANSPORTS=tcp "${RUN[@]}" -- "$top/build/perf/all_reduce_perf" -b "$big" -e "$max" -f "$factor" $BRAID_LARGE -z 1
  } 2>&1 | sed 's/^\[[0-9]*\] //'
}
mpi() {
  "${RUN[@]}" --exec-first -- mpirun.openmpi --allow-run-as-root -np 2 --host 10.213.0.1:1,10.213.0.2:1 \
    --mca plm_rsh_agent "$top/perf/netns_rsh.sh" --mca pml ob1 --mca btl self,tcp \
    --mca btl_tcp_if_include veth0 --mca oob_tcp_if_include veth0 ./build/allreduce_ompi $ARGS $PEER_ITERS
}
gloo() {
  # shellcheck disable=SC2016  # expanded in each namespace
  "${RUN[@]}" --exec -- sh -c 'RANK=$NETNS_HOST WORLD_SIZE=$NETNS_HOSTS MASTER_ADDR=$NETNS_MASTER MASTER_PORT=29400 \
    GLOO_SOCKET_IFNAME=veth0 exec /usr/bin/python3 torch_gloo_allreduce_perf.py "$@"' sh $ARGS $PEER_ITERS
}
# measure (lib_measure.sh) times a command, not a function: it runs this script again with --one.
if [ "${1:-}" = --one ]; then
  "$2"
  exit
fi

REPS=${1:-3}
OUT=${2:-$top/build/netns-peers-$(date -u +%Y%m%dT%H%M%S)}
. "$top/perf/peers_env.sh"
for r in $(seq 1 "$REPS"); do
  measure "$OUT/braid_netns2_tcp.run$r.txt" "$self" --one braid
  [ -z "${NO_MPI:-}" ] && measure "$OUT/ompi_netns2_tcp.run$r.txt" "$self" --one mpi
  [ -z "${NO_GLOO:-}" ] && measure "$OUT/gloo_netns2.run$r.txt" "$self" --one gloo
done
cfgs=$(cd "$OUT" && ls ./*.run*.txt | sed 's|^\./||; s/\.run[0-9]*\.txt$//' | sort -u)
python3 summarize.py "$OUT" $cfgs | tee "$OUT/summary.md"
