#!/usr/bin/env bash
# Valgrind memcheck on a 2-rank run of every collective (tests/tools/valgrind_collectives.cc), once
# over shared memory and once over TCP. The run also calls braid with handles that are no longer
# live (a destroyed communicator and graph, released requests, requests of a destroyed
# communicator): they must be refused without an invalid read. Run by hand (minutes; not part of
# `meson test`).
#
#   scripts/valgrind.sh
#
# Each rank runs under its own valgrind (braidrun starts `valgrind ... valgrind_collectives`), with
# --leak-check=full and definite and indirect leaks counted as errors. Memory errors (invalid
# reads/writes, uninitialised values reaching a syscall or a branch) count too. Suppressions
# (scripts/valgrind.supp) cover non-braid libraries only.
#
# Prints per transport and rank the leak summary, then one verdict line, e.g.
# "valgrind: clean (shm, tcp: 2 ranks each, no leaks, no errors)"; exits non-zero otherwise.
#
# Environment: VALGRIND_BUILD_DIR (default build-valgrind: a plain debugoptimized build, configured
# here if missing; pass an existing non-sanitized build such as `build` to reuse it), BUILD_JOBS
# (default 2), VALGRIND_TRANSPORTS (default "shm tcp"), VALGRIND_RANKS (default 2).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=$ROOT/${VALGRIND_BUILD_DIR:-build-valgrind}
JOBS=${BUILD_JOBS:-2}
RANKS=${VALGRIND_RANKS:-2}
read -r -a TRANSPORTS <<<"${VALGRIND_TRANSPORTS:-shm tcp}"
ERROR_EXIT=97  # valgrind's exit status when it found an error or a counted leak

command -v valgrind >/dev/null || {
  echo "valgrind: not installed (apt-get install valgrind)" >&2
  exit 2
}
sanitize=$(python3 -c '
import json, sys
try:
    opts = json.load(open(sys.argv[1]))
except OSError:
    opts = []
print(next((o["value"] for o in opts if o["name"] == "b_sanitize"), "none"))' "$DIR/meson-info/intro-buildoptions.json")
if [[ $sanitize != none ]]; then
  echo "valgrind: $DIR is a sanitizer build ($sanitize); valgrind needs a plain one" >&2
  exit 2
fi
if [[ ! -f $DIR/build.ninja ]]; then
  meson setup "$DIR" "$ROOT" -Dbuildtype=debugoptimized >/dev/null || exit 1
fi
echo "== building valgrind_collectives and braidrun in $DIR" >&2
meson compile -C "$DIR" -j "$JOBS" valgrind_collectives braidrun >"$DIR/valgrind-build.log" 2>&1 || {
  tail -40 "$DIR/valgrind-build.log" >&2
  exit 1
}

LOGS=$DIR/valgrind-logs
rm -rf "$LOGS"
mkdir -p "$LOGS"

# Valgrind runs the code ~50x slower and serializes its threads: a rank's heartbeats may be late by
# seconds and every wait takes longer. Heartbeats every 10 s (50 s of silence before a peer is
# declared stopped), 10 minutes for any wait, and braidrun waits 5 minutes for the other ranks after
# one failed (its default 2 s would kill a rank in the middle of its own leak check).
export BRAID_HEARTBEAT_MS=10000 BRAID_TIMEOUT=600 BRAIDRUN_GRACE_MS=300000

clean=1
for t in "${TRANSPORTS[@]}"; do
  echo "== $t: $RANKS ranks under valgrind" >&2
  BRAID_TRANSPORTS=$t "$DIR/tools/braidrun" -n "$RANKS" --timeout 1500 -- \
    valgrind --tool=memcheck --leak-check=full --show-leak-kinds=definite,indirect \
    --errors-for-leak-kinds=definite,indirect --error-exitcode=$ERROR_EXIT --num-callers=30 --keep-debuginfo=yes \
    --suppressions="$ROOT/scripts/valgrind.supp" --log-file="$LOGS/$t.rank%q{BRAID_RANK}.log" \
    "$DIR/tests/valgrind_collectives" >"$LOGS/$t.out" 2>&1
  rc=$?
  cat "$LOGS/$t.out" >&2
  for ((r = 0; r < RANKS; ++r)); do
    log=$LOGS/$t.rank$r.log
    if [[ ! -f $log ]]; then
      echo "$t rank $r: no valgrind log" >&2
      clean=0
      continue
    fi
    # "definitely lost: 0 bytes in 0 blocks" etc., and the error count (possibly lost is shown but
    # not counted: interior pointers, e.g. into aligned buffers, make such reports unreliable).
    summary=$(grep -E 'definitely lost:|indirectly lost:|possibly lost:|ERROR SUMMARY:' "$log" | sed 's/^==[0-9]*== *//' | tr '\n' ';')
    [[ -n $summary ]] || summary="no leak summary (all heap blocks freed?): $(grep -E 'All heap blocks|ERROR SUMMARY' "$log" | sed 's/^==[0-9]*== *//' | tr '\n' ';')"
    echo "$t rank $r: $summary" >&2
    if ! grep -qE 'ERROR SUMMARY: 0 errors' "$log"; then
      clean=0
      echo "  see $log" >&2
    fi
  done
  if ((rc != 0)); then
    echo "$t: braidrun exited $rc" >&2
    clean=0
  fi
done

if ((clean)); then
  echo "valgrind: clean (${TRANSPORTS[*]}: $RANKS ranks each, no leaks of braid's, no memory errors)"
  exit 0
fi
echo "valgrind: FAILED (leaks or memory errors; logs in $LOGS)"
exit 1
