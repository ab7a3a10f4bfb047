#!/bin/sh
# libbraid_nccl.so against NVIDIA's nccl.h: soname libnccl.so.2, only nccl*/pnccl* exported, and
# every host function the header declares exported (else a program built against it would fail
# to load, or die at its first call). Usage: check_symbols.sh LIBRARY NCCL_H
set -u
lib=$1
header=$2
status=0

soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
if [ "$soname" != "libnccl.so.2" ]; then
  echo "soname is '$soname', not libnccl.so.2"
  status=1
fi

exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort -u)
others=$(printf '%s\n' "$exported" | grep -Ev '^p?nccl[A-Z][A-Za-z]*$')
if [ -n "$others" ]; then
  echo "exported beyond the NCCL API:"
  printf '%s\n' "$others"
  status=1
fi

# Declarations returning ncclResult_t or const char*. That leaves out ncclResetDebugInit on purpose:
# deprecated, returning void (it could report no error), and not part of the API by NCCL's header.
declared=$(grep -oE '^[[:space:]]*(ncclResult_t|const[[:space:]]+char[[:space:]]*\*)[[:space:]]*p?nccl[A-Za-z]+[[:space:]]*\(' \
  "$header" | grep -oE 'p?nccl[A-Za-z]+[[:space:]]*\(' | tr -d ' (' | sort -u)
if ! printf '%s\n' "$declared" | grep -qx ncclAllReduce; then
  echo "found no declarations (ncclAllReduce among them) in $header: the pattern above no longer matches it"
  exit 1
fi
missing=$(printf '%s\n' "$declared" | while read -r f; do
  printf '%s\n' "$exported" | grep -qx "$f" || echo "$f"
done)
if [ -n "$missing" ]; then
  echo "declared in $header but not exported:"
  printf '%s\n' "$missing"
  status=1
fi

n=$(printf '%s\n' "$exported" | wc -l)
d=$(printf '%s\n' "$declared" | wc -l)
[ $status -eq 0 ] && echo "ok: soname $soname, $n symbols exported, all $d functions of $header present"
exit $status
