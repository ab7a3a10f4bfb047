#!/usr/bin/env bash
# Builds the fuzz targets in fuzz/ with clang++ 14 and libFuzzer (+ AddressSanitizer and
# UndefinedBehaviorSanitizer) into build-fuzz/, then fuzzes each for a bounded time starting from
# its committed corpus, and prints per target the inputs executed and whether it crashed.
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default 60 s, all targets)
# Environment:
#   CXX=clang++-14          the compiler (needs libFuzzer: Debian's clang-14 has it)
#   FUZZ_MERGE=1            afterwards, merge the new inputs that add coverage into fuzz/corpus/
#                           (libFuzzer -merge=1 keeps only those; commit what is worth keeping)
# New inputs go to build-fuzz/corpus/<target>/, crashes to build-fuzz/crashes/<target>-*; a crash
# input belongs in fuzz/corpus/<target>/ once the bug is fixed.
set -euo pipefail

secs=${1:-60}
shift || true
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/build-fuzz
cxx=${CXX:-clang++-14}
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in "$root"/fuzz/fuzz_*.cc; do
    t=$(basename "$f" .cc)
    targets+=("${t#fuzz_}")
  done
fi

# The braid sources the decoders need, compiled once into one archive (only what a target uses is
# linked into it).
lib_sources=(
  src/base/config.cc src/base/dtype.cc src/base/log.cc src/base/socket.cc src/base/status.cc
  src/coll.cc src/plan.cc src/wire.cc
  topology/cost.cc topology/file.cc topology/text_util.cc
  transports/shm/shm_layout.cc transports/tcp/tcp_wire.cc
)
while IFS= read -r src; do lib_sources+=("$src"); done < <(cd "$root" && find algorithms -name '*.cc' | sort)
flags=(-std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
       -I"$root" -I"$root/include")

mkdir -p "$out/obj" "$out/corpus" "$out/crashes" "$out/logs"
objs=()
for src in "${lib_sources[@]}"; do
  obj=$out/obj/$(echo "$src" | tr / _).o
  if [ ! -f "$obj" ] || [ "$root/$src" -nt "$obj" ] || [ -n "$(find "$root/src" "$root/topology" "$root/transports" \
      -name '*.h' -newer "$obj" -print -quit)" ]; then
    echo "fuzz: compiling $src"
    "$cxx" "${flags[@]}" -fsanitize=fuzzer-no-link -c "$root/$src" -o "$obj"
  fi
  objs+=("$obj")
done
rm -f "$out/libbraid_fuzz.a"
ar rcs "$out/libbraid_fuzz.a" "${objs[@]}"

for t in "${targets[@]}"; do
  echo "fuzz: building fuzz_$t"
  "$cxx" "${flags[@]}" -fsanitize=fuzzer "$root/fuzz/fuzz_$t.cc" "$out/libbraid_fuzz.a" -o "$out/fuzz_$t"
done

printf '\n%-16s %12s %8s  %s\n' target executions seconds result
failed=0
for t in "${targets[@]}"; do
  mkdir -p "$out/corpus/$t"
  log=$out/logs/$t.log
  start=$(date +%s)
  rc=0
  # The first directory receives new inputs; the committed corpus is read only.
  "$out/fuzz_$t" -max_total_time="$secs" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$out/crashes/$t-" "$out/corpus/$t" "$root/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  took=$(($(date +%s) - start))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  crashes=$(find "$out/crashes" -name "$t-*" -newer "$out/fuzz_$t" | head -3 | tr '\n' ' ')
  if [ "$rc" -eq 0 ] && [ -z "$crashes" ]; then
    result=ok
  else
    result="CRASH (exit $rc) ${crashes:-see $log}"
    failed=1
  fi
  printf '%-16s %12s %8s  %s\n' "$t" "${execs:-?}" "$took" "$result"
  if [ "${FUZZ_MERGE:-0}" = 1 ] && [ "$result" = ok ]; then
    "$out/fuzz_$t" -merge=1 "$root/fuzz/corpus/$t" "$out/corpus/$t" >"$out/logs/$t.merge.log" 2>&1 ||
      echo "fuzz: merging $t failed (see $out/logs/$t.merge.log)"
  fi
done
exit $failed
