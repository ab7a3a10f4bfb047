#!/bin/bash
# Two braid builds of one benchmark, alternating, the order swapped every round (the first build
# first in odd rounds), so that neither always runs on a machine the other just warmed or cooled;
# prints each size's median time over the rounds (out of place, column 6 of the *_perf output) and
# the ratio. Used where a change is worth a few percent and the machine's drift is larger than that.
#
#   BASE=/tmp/base/build [NEW=build] [SIZES="-b 16 -e 16K -f 4"] [ITERS=2000] [BLOCKING=1] \
#     perf/ab_builds.sh ROUNDS NRANKS PROG [VAR=VALUE ...]
#
# PROG is a perf/ program (all_reduce_perf, broadcast_perf, ...); VAR=VALUE pairs go into both
# builds' environment (BRAID_TRANSPORTS=tcp by default). BLOCKING=0: nonblocking calls and a wait
# (-z 0). "base/new" > 1: NEW is faster.
set -euo pipefail
[ $# -ge 3 ] || { sed -n 2,12p "$0"; exit 2; }
rounds=$1 np=$2 prog=$3
shift 3
top=$(cd "$(dirname "$0")/.." && pwd)
base=${BASE:?set BASE to the build to compare against}
new=${NEW:-$top/build}
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) = 1 ]; then order="base new"; else order="new base"; fi
  for tag in $order; do
    b=$base
    [ "$tag" = new ] && b=$new
    # shellcheck disable=SC2086  # SIZES is a word list
    env BRAID_TRANSPORTS=tcp "$@" "$b/tools/braidrun" -n "$np" "$b/perf/$prog" ${SIZES:--b 16 -e 16K -f 4} \
      -n "${ITERS:-2000}" -w 200 -z "${BLOCKING:-1}" 2>/dev/null | awk -v t="$tag" '/^ +[0-9]/ { print t, $1, $6 }'
  done
done | python3 -c '
import statistics, sys
times = {}
for line in sys.stdin:
    tag, size, us = line.split()
    times.setdefault((int(size), tag), []).append(float(us))
if not times:
    sys.exit("no rows: did the runs fail? (run one by hand: its stderr is not shown here)")
for size in sorted({s for s, _ in times}):
    if (size, "base") not in times or (size, "new") not in times:
        print(f"{size:>10} B  only one build printed this size")
        continue
    b, n = statistics.median(times[(size, "base")]), statistics.median(times[(size, "new")])
    rounds = len(times[(size, "base")])
    print(f"{size:>10} B  base {b:9.2f} us  new {n:9.2f} us  base/new {b / n:5.2f}  ({rounds} rounds)")
'
