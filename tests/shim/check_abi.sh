#!/bin/sh
# Runs abi_facts built against braid's nccl.h and against NVIDIA's; their outputs must match.
# Usage: check_abi.sh ABI_FACTS_BRAID ABI_FACTS_NVIDIA
set -u
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
"$1" > "$dir/braid" || { echo "$1 failed"; exit 1; }
"$2" > "$dir/nvidia" || { echo "$2 failed"; exit 1; }
if ! diff -u "$dir/nvidia" "$dir/braid"; then
  echo "braid's nccl.h differs from NVIDIA's (- NVIDIA, + braid)"
  exit 1
fi
echo "ok: $(wc -l < "$dir/braid") ABI facts identical"
