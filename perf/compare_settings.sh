#!/usr/bin/env bash
# One build, several settings, interleaved: each round runs every program under every setting, the
# settings' order rotated from round to round so that the machine's drift hits all of them alike. Prints,
# per program, size and setting, the min / median / max time over the rounds (out of place and in
# place) and each setting's median against the last one's. Made for settings whose effect depends on
# the moment (perf/results/2026-12-06-slot-stores.md: the FIFO's two speeds on a VM).
#
#   perf/compare_settings.sh ROUNDS OUTDIR "SETTING ..." PROG...
#     e.g. NP=2 SIZES="-b 256K -e 64M -f 4 -n 5 -w 2" perf/compare_settings.sh 10 /tmp/ss \
#       "BRAID_SHM_SLOT_STORES=plain BRAID_SHM_SLOT_STORES=stream BRAID_SHM_SLOT_STORES=auto" \
#       all_reduce_perf broadcast_perf
#   A setting is NAME=value (several joined by commas: A=1,B=2); "-" runs the defaults.
#   Environment: NP (2), SIZES ("-b 1M -e 64M -f 4 -n 5 -w 2"), TRANSPORTS (shm), BUILD (build).
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 4 ] || { sed -n '2,14p' "$0"; exit 2; }
ROUNDS=$1 OUT=$2
read -r -a SETS <<<"$3"
shift 3
NP=${NP:-2} SIZES=${SIZES:-"-b 1M -e 64M -f 4 -n 5 -w 2"} TRANSPORTS=${TRANSPORTS:-shm}
BUILD=$(cd "${BUILD:-$top/build}" && pwd) || exit 2
mkdir -p "$OUT"
: >"$OUT/data.txt"
n=${#SETS[@]}
for r in $(seq 1 "$ROUNDS"); do
  echo "round $r of $ROUNDS"
  for prog in "$@"; do
    for j in $(seq 0 $((n - 1))); do
      set_=${SETS[$(((r + j) % n))]}
      env_=()
      [ "$set_" = - ] || IFS=, read -r -a env_ <<<"$set_"
      # shellcheck disable=SC2086  # SIZES is a list of words
      env "${env_[@]}" BRAID_TRANSPORTS="$TRANSPORTS" "$BUILD/tools/braidrun" -n "$NP" "$BUILD/perf/$prog" $SIZES 2>&1 |
        awk -v p="$prog" -v s="$set_" -v r="$r" '!/^#/ && NF >= 10 && $1 ~ /^[0-9]+$/ {print p, s, $1, $6, $10, r}' \
          >>"$OUT/data.txt"
    done
  done
done
python3 - "$OUT/data.txt" "${SETS[@]}" <<'PY' | tee "$OUT/summary.md"
import collections, statistics, sys
sets = sys.argv[2:]
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    prog, s, size, oop, ip, _ = line.split()
    d[(prog, int(size), s)].append((float(oop), float(ip)))
keys = sorted({(p, z) for p, z, _ in d})
last = sets[-1]
for idx, name in ((0, "out of place"), (1, "in place")):
    print(f"\n{name}: us, min / median / max over the rounds; median / {last}'s median")
    print("| program | size | " + " | ".join(sets) + " | " + " | ".join(f"{s} / last" for s in sets[:-1]) + " |")
    print("|---|---:|" + "---:|" * (2 * len(sets) - 1))
    for prog, size in keys:
        med, cells = {}, []
        for s in sets:
            xs = sorted(x[idx] for x in d[(prog, size, s)])
            if not xs:
                cells.append("")
                continue
            med[s] = statistics.median(xs)
            cells.append(f"{xs[0]:.0f} / {med[s]:.0f} / {xs[-1]:.0f}")
        ratios = [f"{med[s] / med[last]:.2f}" if s in med and last in med else "" for s in sets[:-1]]
        z = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB" if size >= 1 << 10 else f"{size} B"
        print(f"| {prog.replace('_perf', '')} | {z} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
PY
