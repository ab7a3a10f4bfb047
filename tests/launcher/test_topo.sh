#!/usr/bin/env bash
# shellcheck disable=SC2016  # check() evaluates its single-quoted conditions later
# Behaviour checks for braid-topo: the tree and matrix, --json, --dot, --config, --dump/--load, and
# --plan (a dump loaded back plans exactly as the detected machine; a 128-host example plans every
# size), plus its errors. Usage: test_topo.sh path/to/braid-topo SOURCE_DIR. Runs in about 2 s.
set -euo pipefail

if [[ $# -ne 2 || ! -x $1 || ! -d $2/topology/examples ]]; then
  echo "usage: $0 path/to/braid-topo SOURCE_DIR" >&2
  exit 2
fi
BT=$1
EX=$2/topology/examples
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
unset BRAID_ALGO BRAID_APPROXIMATE BRAID_TOPO_FILE BRAID_CHUNK_SIZE
for v in $(env | grep -o '^BRAID_COST_[A-Z_]*'); do unset "$v"; done

passed=0
failed=0
check() {
  if eval "$2"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: $1 [$2] rc=$rc" >&2
    sed 's/^/  stdout: /' "$TMP/out" | head -20 >&2
    sed 's/^/  stderr: /' "$TMP/err" | head -20 >&2
  fi
}
run() {
  set +e
  "$BT" "$@" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  set -e
}

run
check "tree and matrix" '[[ $rc == 0 ]] && grep -q "^Machine" $TMP/out && grep -q "Package" $TMP/out && grep -q "Core" $TMP/out && grep -q "Legend" $TMP/out'

run --json
check "json parses" '[[ $rc == 0 ]] && python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d[\"machine\"]" $TMP/out'

run --dot
check "dot" '[[ $rc == 0 ]] && head -1 $TMP/out | grep -q "^digraph" && tail -1 $TMP/out | grep -q "}"'

BRAID_TIMEOUT=77 run --config
check "config lists the knobs with value, default and help" '[[ $rc == 0 ]] && grep -Eq "^BRAID_TIMEOUT +300 +77 " $TMP/out && grep -q "^BRAID_ALGO " $TMP/out && grep -q "^BRAID_TOPO_FILE " $TMP/out && grep -q "^BRAID_COST_INTER_GBPS " $TMP/out'
check "config: one line per declared knob" '[[ $(grep -c "^BRAID_" $TMP/out) == $(grep -cE "^ *[a-zA-Z]+\(\"BRAID_" '"$2"'/src/base/config.cc) ]]'
# (the value column is whatever the environment sets: scripts/sanitize.sh sets BRAID_HEARTBEAT_MS)
check "config shows each knob's range" 'grep -Eq "^BRAID_HEARTBEAT_MS +1000 +[^ ]+ +0 or 1\.\.3600000 " $TMP/out && grep -Eq "^BRAID_CHECK_MISMATCH .*1\|0\|true" $TMP/out'
BRAID_HEARTBEAT_MS=9223372036854775807 run --config
check "config flags an out-of-range value and exits 1" '[[ $rc == 1 ]] && grep -q "invalid: BRAID_HEARTBEAT_MS=9223372036854775807 is out of range (accepted: 0 or 1..3600000)" $TMP/out'
BRAID_APPROXIMATE=maybe run --plan --ranks 4
check "plan refuses a boolean it cannot read" '[[ $rc == 2 ]] && grep -q "BRAID_APPROXIMATE=maybe is not a boolean" $TMP/err'

run --dump "$TMP/me.topo"
check "dump" '[[ $rc == 0 ]] && head -1 $TMP/me.topo | grep -qx "braid-topology 1" && grep -q "^cost " $TMP/me.topo'
for layout in "4 1" "8 1" "6 2" "16 4"; do
  set -- $layout
  run --plan --ranks "$1" --hosts "$2"
  cp "$TMP/out" "$TMP/detected"
  run --plan --ranks "$1" --hosts "$2" --load "$TMP/me.topo"
  check "plan from a dump equals plan from detection ($layout)" '[[ $rc == 0 ]] && cmp -s $TMP/out $TMP/detected'
done

for f in "$EX"/*.topo; do
  run --load "$f"
  check "example $(basename "$f") loads and renders" '[[ $rc == 0 ]] && grep -q "^Machine" $TMP/out'
done
run --load "$EX/dgx-h100.topo"
check "dgx matrix: NVLink between GPUs, PIX to the NIC beside each" 'grep -q "NV18" $TMP/out && grep -q "PIX" $TMP/out'

run --plan --load "$EX/dgx-h100.topo" --ranks 1024 --hosts 128
check "plan for 128 hosts x 8 GPUs: every size 8 B .. 1 GiB" '[[ $rc == 0 ]] && [[ $(grep -cE "^ +[0-9]+ (B|KiB|MiB|GiB) " $TMP/out) == 28 ]] && grep -q "1024 ranks, 128 hosts" $TMP/out'
run --plan --load "$EX/dgx-h100.topo" --coll broadcast --ranks 16 --hosts 2
check "plan for broadcast" '[[ $rc == 0 ]] && grep -qE "^ +1 GiB +(ring|tree) " $TMP/out'
BRAID_ALGO=allreduce:tree run --plan --ranks 8
check "plan follows BRAID_ALGO" '[[ $rc == 0 ]] && [[ $(grep -cE "^ +[0-9]+ (B|KiB|MiB|GiB) +tree " $TMP/out) == 28 ]]'

run --bogus
check "unknown option: exit 2" '[[ $rc == 2 ]] && grep -q "bogus" $TMP/err'
run --load /nonexistent.topo
check "unreadable file: exit 2" '[[ $rc == 2 ]] && grep -q "nonexistent" $TMP/err'
printf 'braid-topology 99\n' >"$TMP/bad.topo"
run --load "$TMP/bad.topo"
check "bad version: exit 2 naming the line" '[[ $rc == 2 ]] && grep -q "bad.topo:1" $TMP/err'
BRAID_ALGO=allreduce:nope run --plan --ranks 4
check "bad BRAID_ALGO: exit 2" '[[ $rc == 2 ]] && grep -q "unknown algorithm" $TMP/err'
run --plan
check "--plan without a cluster: exit 2" '[[ $rc == 2 ]] && grep -q "ranks" $TMP/err'
run --plan --ranks 4 --coll scan
check "--plan with an unknown collective: exit 2" '[[ $rc == 2 ]] && grep -q "scan" $TMP/err'
run --plan --ranks 8 --coll gather
check "plan for gather: binomial tree for small blocks, linear for large" '[[ $rc == 0 ]] && grep -qE "^ +8 B +tree " $TMP/out && grep -qE "^ +1 GiB +linear " $TMP/out'
BRAID_ALGO=scatter:linear run --plan --ranks 8 --coll scatter
check "plan for scatter follows BRAID_ALGO" '[[ $rc == 0 ]] && [[ $(grep -cE "^ +[0-9]+ (B|KiB|MiB|GiB) +linear " $TMP/out) == 28 ]]'
# --fifo-from: a host of two-copy FIFOs takes the ring for large AllGathers, past the cut only when
# it is not 0; without it the doubling up to two chunks (512 KiB) and the linear plan beyond. A
# loaded cluster line says the same.
run --plan --ranks 4 --coll allgather
check "allgather on one host: doubling to 512 KiB, linear beyond" '[[ $rc == 0 ]] && [[ $(grep -cE "^ +[0-9]+ (B|KiB) +recursive_doubling " $TMP/out) == 17 ]] && [[ $(grep -cE "^ +[0-9]+ (MiB|GiB) +linear " $TMP/out) == 11 ]]'
printf 'braid-topology 1\nmachine hostname=h cores=2 pus=2\nnode id=0 kind=machine\ncluster ranks=4 hosts=0,0,0,0 cores=2 fifo_from=0\n' > "$TMP/fifo.topo"
run --plan --load "$TMP/fifo.topo" --ranks 4 --coll allgather --fifo-from 0
check "--fifo-from 0: the doubling for small calls, the ring for large" '[[ $rc == 0 ]] && grep -qE "^ +8 B +recursive_doubling " $TMP/out && grep -qE "^ +1 GiB +ring " $TMP/out && grep -q "two-copy FIFOs above 0 B" $TMP/out'
cp "$TMP/out" "$TMP/fifo0"
run --plan --ranks 4 --coll allgather --fifo-from 33554432
check "--fifo-from the cut: linear under it" '[[ $rc == 0 ]] && grep -qE "^ +4 MiB +linear " $TMP/out && grep -qE "^ +8 MiB +ring " $TMP/out'
run --plan --load "$TMP/fifo.topo" --coll allgather
check "a cluster line's fifo_from= plans as --fifo-from" '[[ $rc == 0 ]] && cmp -s $TMP/out $TMP/fifo0'
run --plan --ranks 4 --fifo-from 1K
check "--fifo-from with a suffix: exit 2" '[[ $rc == 2 ]] && grep -q "fifo-from wants a byte count" $TMP/err'
run --fifo-from 0
check "--fifo-from without --plan: exit 2" '[[ $rc == 2 ]] && grep -q "go with --plan" $TMP/err'
run --plan --load "$TMP/fifo.topo" --fifo-from 0
check "--fifo-from without --ranks: exit 2" '[[ $rc == 2 ]] && grep -q "goes with --ranks" $TMP/err'

echo "braid-topo: $passed passed, $failed failed"
[[ $failed == 0 ]]
