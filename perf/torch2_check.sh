#!/bin/bash
# braid_torch against PyTorch 2.x (issue "torch.distributed parity": the 2.x branch of
# bindings/torch has never been compiled): builds braid without CUDA (the backend takes CPU tensors;
# a CPU build is the quick one) with -Dtorch=enabled for the python3 on PATH, runs the torch suite
# (tests/torch: collectives, DDP, failures and the parity tests with gloo beside braid), and prints
# one line per test and a summary last. Meant for the lent GPU machine, which has torch 2.11 (see
# perf/gpu_check.sh for what travels along: .gpu-deps/catch2); runs anywhere torch 2.x is.
#
#   perf/torch2_check.sh [BUILD_DIR]        (default build-torch2)
#
# Within about 4 minutes on 16 cores: the build, then the suite (each test forks its ranks). With
# $OUT set the logs are copied there.
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build-torch2}
start=$(date +%s)
py=$(command -v python3)
ver=$("$py" -c "import torch; print(torch.__version__)" 2>&1) || { echo "torch2_check: no torch for $py: $ver"; exit 1; }
echo "torch2_check: torch $ver ($py)"
catch2=()
if [ -f "$src/.gpu-deps/catch2/catch.hpp" ]; then catch2=(-Dcatch2_dir="$src/.gpu-deps"); fi
mkdir -p "$build"
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" "$src" -Dcuda=disabled -Dhwloc=disabled -Ducx=disabled -Dibverbs=disabled -Dtorch=enabled \
    -Dtorch_python="$py" "${catch2[@]}" > "$build/setup.log" 2>&1 ||
    { tail -30 "$build/setup.log"; echo "torch2_check: meson setup failed"; exit 1; }
fi
if ! meson compile -C "$build" > "$build/compile.log" 2>&1; then
  grep -E "error|Error" "$build/compile.log" | head -40
  echo "torch2_check: the build failed after $(( $(date +%s) - start )) s (full log: $build/compile.log)"
  exit 1
fi
echo "torch2_check: built in $(( $(date +%s) - start )) s"
meson test -C "$build" --suite torch --print-errorlogs > "$build/torch-tests.log" 2>&1
rc=$?
grep -E "^ *[0-9]+/[0-9]+ " "$build/torch-tests.log"
summary=$(grep -E "^(Ok|Fail|Skipped|Timeout|Expected Fail|Unexpected Pass):" "$build/torch-tests.log" | tr -s ' ' | tr '\n' ' ')
if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
  mkdir -p "$OUT/torch2-logs"
  cp "$build/setup.log" "$build/compile.log" "$build/torch-tests.log" "$OUT/torch2-logs/" 2>/dev/null
  cp "$build/meson-logs/testlog.txt" "$OUT/torch2-logs/" 2>/dev/null
fi
echo "== torch2_check: torch $ver, $(( $(date +%s) - start )) s: ${summary:-no summary (see $build/torch-tests.log)} =="
exit $rc
