#!/bin/bash
# braid_torch against PyTorch 2.x (issue "torch.distributed parity": the 2.x branch of
# bindings/torch has never been compiled) and on CUDA tensors (issue "GPUs"): builds braid with
# -Dcuda=auto (CUDA where nvcc is, so that braid_torch takes CUDA tensors when this torch has CUDA)
# and -Dtorch=enabled for the python3 on PATH; where that build fails it says so and builds again
# without CUDA, so the CPU suite still runs. Then the torch suite (tests/torch: collectives, CUDA
# tensors, DDP, failures and the parity tests with gloo beside braid), one line per test; and,
# with CUDA tensors and a GPU, DDP 20 steps on CUDA through braid_torch against torch's NCCL
# (perf/ddp_steps.py, 2 ranks on the GPU, else 1). A summary last. Meant for the lent GPU machine,
# which has torch 2.11 (see perf/gpu_check.sh for what travels along: .gpu-deps/catch2); runs
# anywhere torch 2.x is.
#
#   perf/torch2_check.sh [BUILD_DIR]        (default build-torch2)
#
# Within about 5 minutes on 16 cores: the build, then the suite (each test forks its ranks). With
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
# build DIR CUDA_FEATURE: sets up (once) and compiles; returns the compile's status.
build() {
  mkdir -p "$1"
  if [ ! -f "$1/build.ninja" ]; then
    meson setup "$1" "$src" -Dcuda="$2" -Dhwloc=disabled -Ducx=disabled -Dibverbs=disabled -Dtorch=enabled \
      -Dtorch_python="$py" "${catch2[@]}" > "$1/setup.log" 2>&1 || { tail -30 "$1/setup.log"; return 1; }
  fi
  meson compile -C "$1" > "$1/compile.log" 2>&1 || { grep -E "error|Error" "$1/compile.log" | head -40; return 1; }
}
note=""
if ! build "$build" auto; then
  note="the -Dcuda=auto build failed (see $build/compile.log), so this is the CPU build; "
  echo "torch2_check: ${note}building again without CUDA"
  logs_first=$build
  build=$build-cpu
  build "$build" disabled || { echo "torch2_check: the build failed after $(( $(date +%s) - start )) s"; exit 1; }
fi
grep -h "PyTorch backend" "$build/meson-logs/meson-log.txt" 2>/dev/null | tail -1
echo "torch2_check: built in $(( $(date +%s) - start )) s"
meson test -C "$build" --suite torch --print-errorlogs > "$build/torch-tests.log" 2>&1
rc=$?
grep -E "^ *[0-9]+/[0-9]+ " "$build/torch-tests.log"
summary=$(grep -E "^(Ok|Fail|Skipped|Timeout|Expected Fail|Unexpected Pass):" "$build/torch-tests.log" | tr -s ' ' | tr '\n' ' ')
grep -E "^(ok|FAIL|SKIP)" "$build/meson-logs/testlog.txt" 2>/dev/null | grep -i "cuda" | head -10

# DDP on CUDA tensors, braid_torch against torch's NCCL (the same seeds give the same checksum).
ddp_row="DDP on CUDA: not run (braid_torch without CUDA tensors, or no GPU)"
if PYTHONPATH="$build/bindings/torch" "$py" -c "import torch, braid_torch; assert braid_torch.cuda_tensors and torch.cuda.is_available()" 2>/dev/null; then
  for world in 2 1; do
    b=$(PYTHONPATH="$build/bindings/torch" timeout 180 "$py" "$src/perf/ddp_steps.py" --world $world --steps 20 --backend braid 2>&1 | tee "$build/ddp_braid_$world.log" | grep "^ddp " | tail -1)
    n=$(timeout 180 "$py" "$src/perf/ddp_steps.py" --world $world --steps 20 --backend nccl 2>&1 | tee "$build/ddp_nccl_$world.log" | grep "^ddp " | tail -1)
    echo "$b"
    echo "$n"
    bm=$(sed -n 's/.*median_ms=\([0-9.]*\).*/\1/p' <<< "$b")
    nm=$(sed -n 's/.*median_ms=\([0-9.]*\).*/\1/p' <<< "$n")
    if [ -n "$bm" ] && [ -n "$nm" ]; then
      ddp_row="DDP on CUDA, $world rank(s), 20 steps: braid_torch $bm ms, NCCL $nm ms, braid/NCCL $(awk -v a="$bm" -v b="$nm" 'BEGIN { printf "%.2f", a / b }')"
      break
    fi
    ddp_row="DDP on CUDA, $world rank(s): braid_torch ${bm:-FAILED} ms, NCCL ${nm:-FAILED} ms (logs: $build/ddp_*_$world.log)"
  done
fi
echo "$ddp_row"
if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
  mkdir -p "$OUT/torch2-logs"
  cp "$build/setup.log" "$build/compile.log" "$build/torch-tests.log" "$build"/ddp_*.log "$OUT/torch2-logs/" 2>/dev/null
  [ -n "${logs_first:-}" ] && cp "$logs_first/compile.log" "$OUT/torch2-logs/compile-cuda.log" 2>/dev/null
  cp "$build/meson-logs/testlog.txt" "$OUT/torch2-logs/" 2>/dev/null
fi
echo "== torch2_check: torch $ver, $(( $(date +%s) - start )) s: ${note}${summary:-no summary (see $build/torch-tests.log)} =="
exit $rc
