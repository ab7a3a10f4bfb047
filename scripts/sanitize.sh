#!/usr/bin/env bash
# Builds braid with sanitizers and runs the whole test suite under each. Run by hand: the runs take
# far longer than CI's budget, so they are not part of `meson test`.
#
#   scripts/sanitize.sh [asan|tsan|all]        (default: all)
#
#   asan  AddressSanitizer + UndefinedBehaviorSanitizer (+ LeakSanitizer) in build-asan/
#   tsan  ThreadSanitizer in build-tsan/
#
# Prints one verdict line per sanitizer, e.g. "asan+ubsan: clean (28 passed, 0 failed, 0 skipped,
# 0 reports)", and exits non-zero unless every run was clean. The PyTorch backend's tests run under
# asan+ubsan only (the runtimes preloaded into python; see below), and only in a whole-suite run.
# A run is clean when every test passed and no sanitizer report appears anywhere in the test logs
# (a report in a rank whose failure a test expects would otherwise go unnoticed).
#
# Environment: BUILD_JOBS (compile jobs, default 2), MESON_TEST_ARGS (extra `meson test` arguments,
# e.g. "--suite mp" or a test name), TIMEOUT_MULTIPLIER_ASAN / _TSAN (default 3 / 6).
#
# Forked ranks: the multi-process harness (tests/mp/harness.cc) turns a child's exit status into a
# test failure. ASan and UBSan (halt_on_error, abort_on_error) kill the child with SIGABRT at the
# first report, TSan's halt_on_error makes it exit 66, and since children leave with _exit (no atexit
# leak check) the harness runs LeakSanitizer's check itself before _exit.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
JOBS=${BUILD_JOBS:-2}
read -r -a EXTRA_TEST_ARGS <<<"${MESON_TEST_ARGS:-}"

which=${1:-all}
case $which in
  asan | tsan | all) ;;
  *)
    echo "usage: $0 [asan|tsan|all]" >&2
    exit 2
    ;;
esac

# Sanitized code runs 2-3x (ASan) to 5-15x (TSan) slower, and on a loaded machine a rank's
# background thread may not get to send a heartbeat for seconds. These defaults only apply to tests
# that do not set their own values (the harness overwrites them per test): heartbeats every 3 s,
# declared dead after 5 missed (15 s instead of 5 s), and 15 minutes for any wait. Tests that set
# tight values themselves (mp-failure's SIGSTOP detection at 100-200 ms) keep them.
export BRAID_HEARTBEAT_MS=${BRAID_HEARTBEAT_MS:-3000}
export BRAID_HEARTBEAT_MISSES=${BRAID_HEARTBEAT_MISSES:-5}
export BRAID_TIMEOUT=${BRAID_TIMEOUT:-900}

# configure DIR OPTIONS...: sets up DIR, or reconfigures it with OPTIONS when it exists.
configure() {
  local dir=$1
  shift
  if [[ -f $ROOT/$dir/build.ninja ]]; then
    meson configure "$ROOT/$dir" "$@" >/dev/null
  else
    meson setup "$ROOT/$dir" "$ROOT" "$@" >/dev/null
  fi
}

# Counts of results in DIR's test logs LOGBASE... (meson test --logbase): "passed failed skipped".
count_results() {
  local dir=$1
  shift
  python3 -c '
import json, os, sys
ok = bad = skip = 0
for base in sys.argv[2:]:
    path = os.path.join(sys.argv[1], "meson-logs", base + ".json")
    if not os.path.exists(path):
        continue
    for line in open(path):
        if line.strip():
            r = json.loads(line)["result"]
            ok += r in ("OK", "EXPECTEDFAIL")
            skip += r == "SKIP"
            bad += r not in ("OK", "EXPECTEDFAIL", "SKIP")
print(ok, bad, skip)' "$dir" "$@"
}

# Sanitizer reports in DIR's test logs LOGBASE... (every test's stdout and stderr, forked ranks
# included).
count_reports() {
  local dir=$1 base logs=()
  shift
  for base in "$@"; do
    [[ -f $dir/meson-logs/$base.txt ]] && logs+=("$dir/meson-logs/$base.txt")
  done
  ((${#logs[@]} > 0)) || {
    echo 0
    return
  }
  cat "${logs[@]}" | grep -cE '(ERROR|WARNING|FATAL): (AddressSanitizer|LeakSanitizer|ThreadSanitizer)|ThreadSanitizer: starting new threads|runtime error: '
}

# The libpciaccess that hwloc's PCI plugin links, if there is one.
hwloc_pciaccess() {
  local libdir plugin lib
  libdir=$(pkg-config --variable=libdir hwloc 2>/dev/null) || return 1
  plugin=$libdir/hwloc/hwloc_pci.so
  [[ -f $plugin ]] || return 1
  lib=$(ldd "$plugin" | awk '/libpciaccess/ {print $3}')
  [[ -n $lib && -f $lib ]] && echo "$lib"
}

verdicts=()
status=0

# run_one NAME DIR MULTIPLIER TORCH_WRAPPER MESON_OPTIONS...: builds DIR, runs the suite, records
# the verdict. TORCH_WRAPPER empty: the PyTorch backend is not built and its tests skip. Otherwise
# the backend is built (when torch is there) and its tests run apart, each under TORCH_WRAPPER (a
# meson test --wrapper, which puts the sanitizer runtimes in front of Debian's python).
run_one() {
  local name=$1 dir=$2 mult=$3 torch_wrapper=$4 torch=disabled
  shift 4
  [[ -n $torch_wrapper ]] && torch=auto
  echo "== $name: configuring and building $dir" >&2
  if ! configure "$dir" -Dtests=enabled -Dbuildtype=debugoptimized -Dtorch=$torch "$@" ||
    ! meson compile -C "$ROOT/$dir" -j "$JOBS" >"$ROOT/$dir/sanitize-build.log" 2>&1; then
    tail -40 "$ROOT/$dir/sanitize-build.log" >&2 2>/dev/null
    verdicts+=("$name: BUILD FAILED (see $dir/sanitize-build.log)")
    status=1
    return
  fi
  rm -f "$ROOT/$dir"/meson-logs/testlog.{json,txt} "$ROOT/$dir"/meson-logs/testlog-torch*.{json,txt}
  echo "== $name: meson test (timeout multiplier $mult)" >&2
  meson test -C "$ROOT/$dir" --print-errorlogs --timeout-multiplier "$mult" --no-suite torch \
    "${EXTRA_TEST_ARGS[@]}" >&2
  local logs=(testlog) runtimes
  if [[ $torch == auto && ${#EXTRA_TEST_ARGS[@]} -eq 0 ]]; then
    runtimes=$(ldd "$ROOT/$dir/libbraid.so" | awk '/lib(asan|ubsan|tsan)\.so/ {printf "%s%s", sep, $3; sep=" "}')
    echo "== $name: the torch tests, with $runtimes preloaded into python" >&2
    meson test -C "$ROOT/$dir" --print-errorlogs --timeout-multiplier "$mult" --suite torch --logbase testlog-torch \
      --wrapper "env LD_PRELOAD='$runtimes' $torch_wrapper" >&2
    # meson adds the wrapper's name to the log's base name (testlog-torch-env).
    local torch_log
    torch_log=$(cd "$ROOT/$dir/meson-logs" && ls testlog-torch*.json 2>/dev/null | head -1)
    [[ -n $torch_log ]] && logs+=("${torch_log%.json}")
  fi
  local passed failed skipped reports
  read -r passed failed skipped < <(count_results "$ROOT/$dir" "${logs[@]}")
  reports=$(count_reports "$ROOT/$dir" "${logs[@]}")
  local counts="$passed passed, $failed failed, $skipped skipped, $reports reports"
  [[ $torch == disabled ]] && counts+="; torch tests not run"
  if ((failed == 0 && reports == 0 && passed > 0)); then
    verdicts+=("$name: clean ($counts)")
  else
    verdicts+=("$name: FAILED ($counts; see $dir/meson-logs/testlog*.txt)")
    status=1
  fi
}

if [[ $which == asan || $which == all ]]; then
  # halt_on_error/abort_on_error: the first report kills the process (a forked rank dies of SIGABRT,
  # which the harness reports). Nothing is suppressed.
  #
  # intercept_tls_get_addr=0: GCC 12's sanitizer runtime (up to GCC 13 / LLVM 16) intercepts
  # __tls_get_addr and takes any dynamic TLS block that starts at a certain offset into its page for
  # one with a glibc 2.19 header, reading two words before it as the block's bounds. Since glibc
  # 2.25 there is no such header, so now and then it records a garbage range (seen here as
  # "DTLS 7 at 0x000000000458-0x00040000155a") and LeakSanitizer's tracer faults scanning it:
  # "Tracer caught signal 11 ... LeakSanitizer has encountered a fatal error" in a forked rank
  # (mp-gossip, mp-failure), after its test body passed. Without the interceptor LeakSanitizer does
  # not scan dynamically allocated TLS, which only dlopened modules use: braid's thread_locals are
  # in libbraid, loaded at start, whose TLS is static.
  export ASAN_OPTIONS=halt_on_error=1:abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1:intercept_tls_get_addr=0
  # hwloc's PCI plugin (dlopened by hwloc_topology_load, dlclosed when the topology is destroyed)
  # unloads libpciaccess with its cache of PCI device names still allocated: LeakSanitizer then
  # reports ~1 KB "leaked" from frames it cannot name (both modules are gone by exit, and the fast
  # unwinder stops there, before any hwloc frame), so no suppression can match it. Keeping libpciaccess loaded keeps the cache
  # reachable from its static, so nothing is reported; verify_asan_link_order=0 allows the preload
  # ahead of the ASan runtime.
  saved_preload=${LD_PRELOAD-}
  if pciaccess=$(hwloc_pciaccess); then
    export LD_PRELOAD=$pciaccess${LD_PRELOAD:+:$LD_PRELOAD}
    ASAN_OPTIONS+=:verify_asan_link_order=0
  fi
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # The torch tests: braid_torch loads into Debian's uninstrumented python, so the ASan and UBSan
  # runtimes are preloaded to come first (python's own mallocs then go through ASan too). No leak
  # check there: python and torch leave megabytes allocated at exit (none of it braid's; the ranks
  # themselves leave by os._exit), and braid's leaks are checked by the rest of the suite.
  torch_wrapper="ASAN_OPTIONS=$ASAN_OPTIONS:detect_leaks=0"  # the last setting wins
  # b_lundef=false: the sanitizer runtimes resolve some symbols at load time.
  run_one "asan+ubsan" build-asan "${TIMEOUT_MULTIPLIER_ASAN:-3}" "$torch_wrapper" \
    -Db_sanitize=address,undefined -Db_lundef=false
  unset ASAN_OPTIONS UBSAN_OPTIONS
  if [[ -n $saved_preload ]]; then export LD_PRELOAD=$saved_preload; else unset LD_PRELOAD; fi
fi

if [[ $which == tsan || $which == all ]]; then
  export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1  # no suppressions
  # UCM's memory hooks off (UCX installs them when libucp loads, in ranks whose BRAID_TRANSPORTS
  # names ucx): glibc's start_thread calls madvise on the new thread's stack guard before TSan has
  # set the thread up, UCM's madvise takes its event lock through TSan's rwlock interceptor, and
  # the rank dies of SIGSEGV (in __tsan::MutexPreReadLock from ucm_event_enter from ucm_madvise).
  # braid needs none of UCM's events: it maps and registers its own memory with ucp_mem_map.
  export UCX_MEM_EVENTS=no
  # Not the torch tests: TSan cannot see the atomics of uninstrumented torch, gloo and libstdc++
  # (reference counts of c10d work objects, of exception_ptr, of torch's copy-on-write strings), so
  # with the runtime preloaded into python it reports races inside them (pthread_cond_destroy under
  # ProcessGroupGloo::AsyncWork, operator delete under std::runtime_error) with no braid frame.
  echo "== tsan: the torch tests skip (TSan reports races inside uninstrumented torch and libstdc++)" >&2
  run_one "tsan" build-tsan "${TIMEOUT_MULTIPLIER_TSAN:-6}" "" -Db_sanitize=thread -Db_lundef=false
  unset TSAN_OPTIONS UCX_MEM_EVENTS
fi

for v in "${verdicts[@]}"; do echo "$v"; done
exit $status
