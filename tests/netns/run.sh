#!/usr/bin/env bash
# run.sh H N [--rate RATE] [--delay-us D] [--timeout SEC] [--exec] -- PROGRAM ARGS...
#
# A multi-host braid job on one machine: H network namespaces ("hosts"), each joined by a veth pair to
# a bridge that lives in a namespace of its own (the root namespace is never touched), and one
# `braidrun --nnodes H --node-rank K --master ADDR:PORT -n N PROGRAM ARGS` inside each. Exits with the
# job's status: the first non-zero status of the hosts' braidruns, in the order they ended, naming the
# host; 0 when every host succeeded; 77 (meson's skip) where namespaces cannot be made (not root, no
# `ip netns`); 2 on bad arguments.
#
#   --rate RATE     tc tbf rate limit (tc's units: 1gbit, 500mbit) on both directions of every host's link
#   --delay-us D    per-message delay injected by braid's tcp transport (BRAID_TCP_TEST_DELAY_US=D): the
#                   kernel has no netem. A braid that does not declare the knob would ignore it silently,
#                   so that is a skip (77) saying so.
#   --timeout SEC   passed to every braidrun (the job stops and exits 124 after SEC seconds)
#   --exec          run PROGRAM itself in each namespace instead of braidrun (N is then ignored), with
#                   NETNS_HOST=K, NETNS_HOSTS=H, NETNS_MASTER=10.213.0.1 and NETNS_PREFIX (namespace K is
#                   $NETNS_PREFIX$K): for other libraries' launchers (perf/netns_peers.sh)
#   --exec-first    the same, in host 0's namespace only: for a launcher there that reaches the others
#                   itself (mpirun with --mca plm_rsh_agent perf/netns_rsh.sh)
#
# Every host gets BRAID_HOSTID (else braid's shm transport would join ranks of different namespaces:
# they share /dev/shm), BRAID_SOCKET_IFNAME=veth0 (the host's end of its veth pair), one BRAID_SECRET for
# the whole job, and for UCX UCX_TLS=tcp,self (else UCX finds shared memory across namespaces) and
# UCX_NET_DEVICES=veth0, unless the caller set them. Addresses are 10.213.0.K+1/24, reachable only inside
# this run's namespaces. Everything created is named braidnet<pid>-... and removed on exit, on failure,
# on Ctrl-C and on SIGTERM; a run that was SIGKILLed leaves its namespaces behind, and the next run removes
# those whose script is gone.
#
# BRAIDRUN names the launcher (default: build/tools/braidrun of this checkout, then PATH); BRAID_TOPO the
# braid-topo used to ask which knobs braid declares (default: beside braidrun).
set -uo pipefail

usage() {
  sed -n '2,/^set -uo/{/^set -uo/d;s/^# \{0,1\}//;p}' "$0" >&2
  exit 2
}
die() {
  echo "run.sh: $*" >&2
  exit 2
}
skip() {
  echo "run.sh: SKIP: $*" >&2
  exit 77
}

[ $# -ge 2 ] || usage
hosts=$1 ranks=$2
shift 2
[[ $hosts =~ ^[1-9][0-9]*$ && $hosts -le 200 ]] || die "H must be 1..200, got '$hosts'"
[[ $ranks =~ ^[1-9][0-9]*$ ]] || die "N must be a positive whole number, got '$ranks'"
rate="" delay="" timeout="" exec_mode=0
while [ $# -gt 0 ]; do
  case $1 in
    --rate) rate=${2:?--rate needs a value}; shift 2 ;;
    --delay-us) delay=${2:?--delay-us needs a value}; shift 2 ;;
    --timeout) timeout=${2:?--timeout needs a value}; shift 2 ;;
    --exec) exec_mode=1; shift ;;
    --exec-first) exec_mode=2; shift ;;
    --) shift; break ;;
    -h | --help) usage ;;
    *) die "unknown option '$1' (PROGRAM goes after --)" ;;
  esac
done
[ $# -ge 1 ] || die "missing -- PROGRAM"
[ -z "$delay" ] || [[ $delay =~ ^[0-9]+$ ]] || die "--delay-us must be a whole number, got '$delay'"

here=$(cd "$(dirname "$0")" && pwd)
braidrun=${BRAIDRUN:-}
if [ -z "$braidrun" ]; then
  if [ -x "$here/../../build/tools/braidrun" ]; then braidrun=$here/../../build/tools/braidrun
  else braidrun=$(command -v braidrun) || braidrun=""
  fi
fi
if [ $exec_mode = 0 ] || [ -n "$delay" ]; then
  [ -n "$braidrun" ] || die "no braidrun: build braid or set BRAIDRUN"
  [ -x "$braidrun" ] || die "BRAIDRUN=$braidrun is not executable"
  braidrun=$(cd "$(dirname "$braidrun")" && pwd)/$(basename "$braidrun")
fi

[ "$(id -u)" = 0 ] || skip "network namespaces need root (uid $(id -u))"
command -v ip >/dev/null || skip "no 'ip' command (install iproute2)"
ip netns list >/dev/null 2>&1 || skip "'ip netns' does not work here"
if [ -n "$rate" ]; then command -v tc >/dev/null || skip "--rate needs tc (iproute2)"; fi

if [ -n "$delay" ]; then
  topo=${BRAID_TOPO:-$(dirname "$braidrun")/braid-topo}
  [ -x "$topo" ] || die "--delay-us: cannot ask braid which knobs it has: no braid-topo at $topo (set BRAID_TOPO)"
  # braid ignores BRAID_* variables it does not declare, so an unknown knob would make a run without delay
  # look like one with it.
  "$topo" --config 2>/dev/null | grep -q BRAID_TCP_TEST_DELAY_US ||
    skip "this braid does not declare BRAID_TCP_TEST_DELAY_US (the tcp transport's delay knob): no delay to inject"
fi

tag=braidnet$$
bridge_ns=$tag-br
host_ns=()
for ((k = 0; k < hosts; k++)); do host_ns+=("$tag-h$k"); done
pids=()

# Every process still inside namespace $1 (what a SIGKILLed run left running there).
kill_in() {
  local p
  for p in $(ip netns pids "$1" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
}

# Namespaces of earlier runs that died without cleaning up (SIGKILL): their pid is in the name.
for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^braidnet[0-9]+-' || true); do
  owner=${ns#braidnet}
  owner=${owner%%-*}
  if [ ! -d "/proc/$owner" ]; then
    kill_in "$ns"
    ip netns del "$ns" 2>/dev/null || true
  fi
done

cleaned=0
cleanup() {
  [ $cleaned = 1 ] && return
  cleaned=1
  # The braidruns first (they pass SIGTERM on to their ranks), so that nothing is left running in a
  # namespace that is being deleted; then the namespaces, which takes their veths and bridge with them.
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for ((i = 0; i < 50; i++)); do
    local alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  local ns
  for ns in "${host_ns[@]}" "$bridge_ns"; do
    kill_in "$ns"  # a rank whose braidrun was killed before it could end it
    ip netns del "$ns" 2>/dev/null
  done
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM
trap 'cleanup; exit 129' HUP

# Fails the run (status 1, not a skip: root could make namespaces, so this is a real error).
setup() {
  local out
  if ! out=$("$@" 2>&1); then
    echo "run.sh: setup failed: $*: $out" >&2
    exit 1
  fi
}

if ! out=$(ip netns add "$bridge_ns" 2>&1); then
  skip "cannot create a network namespace: $out"
fi
setup ip -n "$bridge_ns" link add br0 type bridge
setup ip -n "$bridge_ns" link set br0 up
for ((k = 0; k < hosts; k++)); do
  ns=${host_ns[$k]}
  setup ip netns add "$ns"
  setup ip -n "$ns" link set lo up
  # Both ends are created straight inside their namespaces: no name ever appears in the root namespace.
  setup ip link add veth0 netns "$ns" type veth peer name p$k netns "$bridge_ns"
  setup ip -n "$bridge_ns" link set p$k master br0
  setup ip -n "$bridge_ns" link set p$k up
  setup ip -n "$ns" addr add 10.213.0.$((k + 1))/24 dev veth0
  setup ip -n "$ns" link set veth0 up
  if [ -n "$rate" ]; then
    # One bucket per direction: the host's egress on veth0, its ingress as the bridge port's egress. The
    # burst is larger than a 64 KiB GSO segment (tbf drops what exceeds it); the queue holds 20 ms.
    setup tc -n "$ns" qdisc add dev veth0 root tbf rate "$rate" burst 256kb latency 20ms
    setup tc -n "$bridge_ns" qdisc add dev p$k root tbf rate "$rate" burst 256kb latency 20ms
  fi
done

secret=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
master=10.213.0.1:29500
launcher=("$braidrun" --nnodes "$hosts" --master "$master" -n "$ranks" --tag-output)
[ -n "$timeout" ] && launcher+=(--timeout "$timeout")
env_all=(BRAID_SECRET="$secret" BRAID_SOCKET_IFNAME=veth0 UCX_TLS="${UCX_TLS:-tcp,self}"
  UCX_NET_DEVICES="${UCX_NET_DEVICES:-veth0}")
[ -n "$delay" ] && env_all+=(BRAID_TCP_TEST_DELAY_US="$delay")

declare -A host_of
for ((k = 0; k < (exec_mode == 2 ? 1 : hosts); k++)); do
  # Each host also gets a hostname of its own (h0, h1, ...: a UTS namespace), so that braid's messages
  # ("rank 3 (host h1, pid ...)") say which namespace a rank ran in.
  in_host=(ip netns exec "${host_ns[$k]}" unshare --uts -- sh -c 'hostname "$0" && exec "$@"' "h$k"
    env "${env_all[@]}" BRAID_HOSTID="$tag-h$k")
  if [ $exec_mode != 0 ]; then
    "${in_host[@]}" NETNS_HOST=$k NETNS_HOSTS="$hosts" NETNS_MASTER=10.213.0.1 NETNS_PREFIX="$tag-h" "$@" &
  else
    "${in_host[@]}" "${launcher[@]}" --node-rank "$k" -- "$@" &
  fi
  pids+=($!)
  host_of[$!]=$k
done

status=0
failed_host=""
running=("${pids[@]}")
while [ ${#running[@]} -gt 0 ]; do
  unset done_pid
  wait -n -p done_pid "${running[@]}"
  rc=$?
  if [ -z "${done_pid:-}" ]; then
    # wait -n returned without naming a host (once, in a full suite run under bash 5.2.15, which
    # then stopped on the unset variable; not reproduced in 100 runs since): wait for the first.
    done_pid=${running[0]}
    wait "$done_pid"
    rc=$?
  fi
  k=${host_of[$done_pid]}
  rest=()
  for p in "${running[@]}"; do [ "$p" = "$done_pid" ] || rest+=("$p"); done
  running=("${rest[@]}")
  if [ $rc != 0 ] && [ -z "$failed_host" ]; then
    status=$rc failed_host=$k
    what="namespace ${host_ns[$k]}"
    [ $exec_mode = 0 ] && what+=", ranks $((k * ranks))-$((k * ranks + ranks - 1))"
    if [ $rc = 77 ]; then echo "run.sh: host $k ($what) skipped (status 77)" >&2
    else echo "run.sh: host $k ($what) failed with status $rc" >&2
    fi
  fi
done
pids=()
exit $status
