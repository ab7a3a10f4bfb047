#!/usr/bin/env bash
# perf/settings_ab: one row per setting, and each setting reaches its own communicator (an out-of-range
# value fails the split that reads it, naming the variable, though the launcher's environment is fine).
#   test_settings_ab.sh BRAIDRUN SETTINGS_AB
set -uo pipefail
run=$1 ab=$2
out=$(BRAID_TRANSPORTS=shm "$run" -n 2 "$ab" -c alltoall -b 1M -r 2 -k 2 - BRAID_COPY_PIECE=0 2>&1)
rc=$?
[ $rc -eq 0 ] || { echo "settings_ab failed ($rc): $out"; exit 1; }
rows=$(grep -c -E '^  (-|BRAID_COPY_PIECE=0) +[0-9.]+ ' <<<"$out")
[ "$rows" -eq 2 ] || { echo "expected a row for each of the 2 settings, got $rows: $out"; exit 1; }
out=$(BRAID_TRANSPORTS=shm "$run" -n 2 "$ab" -b 64K -r 1 - BRAID_COPY_PIECE=1K 2>&1)
rc=$?
[ $rc -ne 0 ] || { echo "BRAID_COPY_PIECE=1K was not applied to its communicator: $out"; exit 1; }
grep -q "BRAID_COPY_PIECE=1K is out of range" <<<"$out" || { echo "no error naming BRAID_COPY_PIECE: $out"; exit 1; }
# A count with anything after it is refused before any rank starts a communicator ("5x" used to run 5).
for bad in "-r 5x" "-k 2x" "-r 0" "-k -1"; do
  out=$(BRAID_TRANSPORTS=shm "$run" -n 2 "$ab" $bad - 2>&1)
  rc=$?
  [ $rc -ne 0 ] || { echo "settings_ab $bad was accepted: $out"; exit 1; }
  grep -q -- "-r and -k a count" <<<"$out" || { echo "settings_ab $bad: no error naming -r and -k: $out"; exit 1; }
done
echo "settings_ab: a row per setting, each setting applied to its own communicator, bad counts refused"
