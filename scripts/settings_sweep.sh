#!/usr/bin/env bash
# Runs groups of the multi-process tests with one non-default setting at a time in the environment.
# Run by hand (about 2 minutes per setting and group here; far past CI's budget). CI runs each test
# under the defaults and a few fixed variants (mp-tcp-zerocopy, mp-*-lowered, mp-*-nsocks, ...);
# this finds what only a setting a user may choose breaks (BRAID_TCP_ZEROCOPY=1 hung and corrupted
# memory until 2026-12-05: a by-hand loop of settings over the failure stress's cases found it;
# this script runs whole tag groups instead).
#
#   scripts/settings_sweep.sh [OUTDIR]          (default: /tmp/braid-sweep)
#
# Environment: SETTINGS (newline-separated lines of VAR=VALUE ... ; default: the list below),
# GROUPS_ (newline-separated Catch2 tag expressions; default: the three below), BUILD (default:
# build). Touch OUTDIR/stop to end it after the current run.
#
# Prints one line per setting and group ("rc=0 98s [setting] group: ...") into OUTDIR/summary and
# keeps each run's output in OUTDIR. A failure is a bug, or a test that depends on a default
# without pinning it (the fix then is to pin it in that test, as tests/mp/test_forward.cc's shmEnv
# pins BRAID_NT_STORES_MIN, BRAID_CHUNK_SIZE and BRAID_SHM_SLOT_SIZE). Known by design:
# BRAID_SHM_SMALL_BYTES=0 fails the tests of the mailbox path (there are no mailboxes). The tests of
# the mailboxes and of the direct path pin BRAID_ALGO empty. A [ucx] group under 64-byte rma slots
# (BRAID_UCX_RMA_SLOT_SIZE=64) runs for many minutes (a 16 KiB AllReduce takes 12-16 ms there). (A
# forced call on one rank against a mailbox call on another, test_failure.cc's "BRAID_CHECK_MISMATCH"
# form 1 under BRAID_ALGO=recursive_doubling, waited for BRAID_TIMEOUT until the call watch,
# src/call_watch.h, 2026-12-07. Its sweep also found
# BRAID_CHECK_MISMATCH failing correct programs after point-to-point calls, and a segfault of ucx
# rma's teardown after a peer's death under BRAID_CHUNK_SIZE=8192.)
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:-/tmp/braid-sweep}
BUILD=${BUILD:-build}
TESTS="$ROOT/$BUILD/tests/mp_tests"
[ -x "$TESTS" ] || { echo "no $TESTS: build first (meson setup $BUILD && ninja -C $BUILD)" >&2; exit 2; }
mkdir -p "$OUT"

DEFAULT_SETTINGS='BRAID_NSOCKS=3
BRAID_SHM_SLOTS=1
BRAID_SHM_SLOTS=2 BRAID_SHM_SLOT_SIZE=4096
BRAID_CHUNK_SIZE=8192
BRAID_ALGO=ring
BRAID_ALGO=tree
BRAID_ALGO=rabenseifner
BRAID_TCP_ZEROCOPY=1 BRAID_TCP_CHUNK=65536
BRAID_TCP_SOCKBUF=64K BRAID_TCP_CHUNK=4K
BRAID_TCP_TEST_DELAY_US=300
BRAID_SHM_CMA=1 BRAID_SHM_CMA_MIN=0
BRAID_SHM_CMA=1 BRAID_SHM_CMA_SPLIT=0 BRAID_SHM_CMA_MIN=0
BRAID_NT_STORES_MIN=1
BRAID_SHM_SLOT_STORES=stream
BRAID_SHM_SLOT_STORES=plain
BRAID_SHM_MAIL_STORES=stream
BRAID_SHM_MAIL_STORES=plain
BRAID_SIMD=scalar
BRAID_SIMD=avx2
BRAID_SPIN_US=0
BRAID_P2P_TAGS=1
BRAID_CHECK_MISMATCH=1
BRAID_DEBUG=TRACE BRAID_DEBUG_FILE=/dev/null
BRAID_HEARTBEAT_MS=20 BRAID_HEARTBEAT_MISSES=50
BRAID_UCX_PROTO=rma
BRAID_UCX_PROTO=rma BRAID_UCX_RMA_INLINE=0
BRAID_COPY_PIECE=4K
BRAID_TCP_CROWD_SNDBUF=64K
BRAID_ALGO=linear
BRAID_COST_INTRA_ALPHA_US=100000
BRAID_COST_INTRA_GBPS=0.001
BRAID_COST_OVERSUB_SHM_US=0 BRAID_COST_OVERSUB_US=0'
DEFAULT_GROUPS='[shm],[direct],[small],[links],[failure],[p2p],[requests],[leave]
[tcp],[tcpnet],[algos],[gather],[split],[forward],[errors],[abort],[gossip],[hosts],[tags]
[ucx]'

mapfile -t settings <<<"${SETTINGS:-$DEFAULT_SETTINGS}"
mapfile -t groups <<<"${GROUPS_:-$DEFAULT_GROUPS}"
failed=0
for s in "${settings[@]}"; do
  [ -n "$s" ] || continue
  read -r -a vars <<<"$s"
  for g in "${groups[@]}"; do
    [ -e "$OUT/stop" ] && exit "$failed"
    [ -n "$g" ] || continue
    log="$OUT/$(echo "$s $g" | tr -c 'A-Za-z0-9' '_' | cut -c1-120).log"
    start=$(date +%s)
    (cd "$ROOT/$BUILD" && env "${vars[@]}" UCX_NET_DEVICES=lo timeout 900 "$TESTS" --warn NoTests "$g") >"$log" 2>&1
    rc=$?
    [ $rc -eq 0 ] || failed=1
    echo "rc=$rc $(($(date +%s) - start))s [$s] $g: $(tail -2 "$log" | tr '\n' ' ')" | tee -a "$OUT/summary"
  done
done
exit "$failed"
