#!/usr/bin/env bash
# shellcheck disable=SC2016,SC2034  # check() evaluates its single-quoted conditions (and their variables) later
# Behaviour checks for braidrun, the local launcher: environment, option errors, failure handling, signals,
# --timeout, --tag-output. Usage: test_braidrun.sh path/to/braidrun. Runs in about 15 s.
set -euo pipefail

if [[ $# -ne 1 || ! -x $1 ]]; then
  echo "usage: $0 path/to/braidrun" >&2
  exit 2
fi
BR=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
unset BRAID_ROOT BRAID_SECRET BRAIDRUN_GRACE_MS BRAID_HOSTID

passed=0
failed=0

# check NAME CONDITION: CONDITION is bash evaluated after the last run (rc, $TMP/out, $TMP/err, elapsed_ms).
check() {
  if eval "$2"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: $1 [$2] rc=$rc elapsed=${elapsed_ms}ms" >&2
    sed 's/^/  stdout: /' "$TMP/out" | head -20 >&2
    sed 's/^/  stderr: /' "$TMP/err" | head -20 >&2
  fi
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# run ARGS...: braidrun in the foreground; sets rc and elapsed_ms.
run() {
  local start
  start=$(now_ms)
  set +e
  "$BR" "$@" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  set -e
  elapsed_ms=$(($(now_ms) - start))
}

# start_bg ARGS...: braidrun in the background (pid in bg); finish_bg waits and sets rc, elapsed_ms.
start_bg() {
  bg_start=$(now_ms)
  "$BR" "$@" >"$TMP/out" 2>"$TMP/err" &
  bg=$!
}
finish_bg() {
  set +e
  wait "$bg"
  rc=$?
  set -e
  elapsed_ms=$(($(now_ms) - bg_start))
}

# wait_files N PREFIX: waits (up to 10 s) until the ranks created PREFIX.0 .. PREFIX.N-1.
wait_files() {
  local i
  for ((i = 0; i < 200; i++)); do
    local have=0 r
    for ((r = 0; r < $1; r++)); do [[ -e $2.$r ]] && have=$((have + 1)); done
    [[ $have -eq $1 ]] && return 0
    sleep 0.05
  done
  echo "timed out waiting for $2.*" >&2
  return 1
}

rc=0
elapsed_ms=0

# --- options -------------------------------------------------------------------------------------------------------
run --help
check "help" '[[ $rc == 0 ]] && grep -q "usage: braidrun" "$TMP/out"'
run
check "missing program" '[[ $rc == 2 ]] && grep -q "missing PROGRAM" "$TMP/err" && grep -q -- "--help" "$TMP/err"'
run -n 0 true
check "n < 1" '[[ $rc == 2 ]] && grep -q -- "-n must be" "$TMP/err"'
run -n four true
check "non-numeric n" '[[ $rc == 2 ]] && grep -q "not a whole number" "$TMP/err"'
run --timeout soon true
check "non-numeric timeout" '[[ $rc == 2 ]] && grep -q "timeout" "$TMP/err"'
run --bogus true
check "unknown option" '[[ $rc == 2 ]] && grep -q "unknown option .--bogus." "$TMP/err"'
run --hosts 3 -n 4 true
check "hosts must divide n" '[[ $rc == 2 ]] && grep -q "not divisible" "$TMP/err"'
run --nnodes 2 -n 1 true
check "nnodes needs master" '[[ $rc == 2 ]] && grep -q -- "--master" "$TMP/err"'
run -n 1 -- echo -n x
check "options after PROGRAM belong to it" '[[ $rc == 0 && $(cat "$TMP/out") == x ]]'

# --- environment ---------------------------------------------------------------------------------------------------
run -n 4 env
check "all ranks exit 0" '[[ $rc == 0 ]]'
check "ranks 0..3" '[[ $(grep "^BRAID_RANK=" "$TMP/out" | sort | tr "\n" " ") == "BRAID_RANK=0 BRAID_RANK=1 BRAID_RANK=2 BRAID_RANK=3 " ]]'
check "world size" '[[ $(grep -c "^BRAID_WORLD_SIZE=4$" "$TMP/out") == 4 ]]'
check "local rank/size" '[[ $(grep -c "^BRAID_LOCAL_SIZE=4$" "$TMP/out") == 4 && $(grep "^BRAID_LOCAL_RANK=" "$TMP/out" | sort -u | wc -l) == 4 ]]'
check "one root on loopback" '[[ $(grep "^BRAID_ROOT=" "$TMP/out" | sort -u | grep -cE "^BRAID_ROOT=127\.0\.0\.1:[0-9]+$") == 1 && $(grep -c "^BRAID_ROOT=" "$TMP/out") == 4 ]]'
check "one 32-hex secret" '[[ $(grep "^BRAID_SECRET=" "$TMP/out" | sort -u | grep -cE "^BRAID_SECRET=[0-9a-f]{32}$") == 1 && $(grep -c "^BRAID_SECRET=" "$TMP/out") == 4 ]]'
check "no hostid without --hosts" '! grep -q "^BRAID_HOSTID=" "$TMP/out"'
secret1=$(grep -m1 "^BRAID_SECRET=" "$TMP/out")
run -n 1 env
check "secret differs per job" '[[ $(grep "^BRAID_SECRET=" "$TMP/out") != "$secret1" ]]'

run --hosts 2 -n 4 sh -c 'echo $BRAID_RANK $BRAID_HOSTID $BRAID_LOCAL_RANK $BRAID_LOCAL_SIZE'
check "emulated hosts" '[[ $rc == 0 && $(sort "$TMP/out" | tr "\n" ,) == "0 emuhost0 0 2,1 emuhost0 1 2,2 emuhost1 0 2,3 emuhost1 1 2," ]]'

run --nnodes 2 --node-rank 1 --master 10.0.0.1:29500 -n 2 \
  sh -c 'echo $BRAID_RANK $BRAID_WORLD_SIZE $BRAID_ROOT $BRAID_LOCAL_RANK $BRAID_LOCAL_SIZE ${BRAID_SECRET:-none}'
check "multi-host ranks" '[[ $(sort "$TMP/out" | tr "\n" ,) == "2 4 10.0.0.1:29500 0 2 none,3 4 10.0.0.1:29500 1 2 none," ]]'
check "multi-host secret warning" 'grep -q "warning: BRAID_SECRET" "$TMP/err"'
export BRAID_SECRET=00112233445566778899aabbccddeeff
run --nnodes 2 --node-rank 0 --master 10.0.0.1:29500 -n 1 sh -c 'echo $BRAID_SECRET'
check "multi-host shared secret" '[[ $(cat "$TMP/out") == $BRAID_SECRET ]] && ! grep -q warning "$TMP/err"'
unset BRAID_SECRET

export BRAID_ROOT=192.0.2.7:4242
run -n 2 -x FOO=bar -x BAZ=a=b sh -c 'echo $BRAID_ROOT $FOO $BAZ'
check "preset root kept, -x" '[[ $(sort -u "$TMP/out") == "192.0.2.7:4242 bar a=b" ]]'
unset BRAID_ROOT

run -n 2 --tag-output sh -c 'echo out$BRAID_RANK; echo err$BRAID_RANK >&2; printf tail$BRAID_RANK'
check "tag-output stdout" '[[ $(sort "$TMP/out" | tr "\n" ,) == "[0] out0,[0] tail0,[1] out1,[1] tail1," ]]'
check "tag-output stderr" '[[ $(sort "$TMP/err" | tr "\n" ,) == "[0] err0,[1] err1," ]]'

# --- failures ------------------------------------------------------------------------------------------------------
run -n 4 sh -c '[ $BRAID_RANK = 2 ] && exit 3; sleep 30'
check "failed rank's status" '[[ $rc == 3 ]]'
check "failure message" 'grep -qE "^braidrun: rank 2 \(pid [0-9]+\) exited with status 3$" "$TMP/err"'
check "others ended within 5 s" '(( elapsed_ms < 5000 ))'

rm -f "$TMP"/pid.*
start_bg -n 3 sh -c 'echo $$ > "$0/pid.$BRAID_RANK"; exec sleep 30' "$TMP"
wait_files 3 "$TMP/pid"
kill -9 "$(cat "$TMP/pid.1")"
finish_bg
check "kill -9 of a rank" '[[ $rc == 137 ]] && grep -qE "rank 1 \(pid [0-9]+\) was killed by signal 9 \(Killed\)" "$TMP/err"'

export BRAIDRUN_GRACE_MS=200
run -n 2 sh -c 'if [ $BRAID_RANK = 0 ]; then exit 1; fi; trap "" TERM; exec sleep 30'
check "SIGKILL after ignored SIGTERM" '[[ $rc == 1 ]] && grep -q SIGKILL "$TMP/err" && (( elapsed_ms < 8000 ))'
unset BRAIDRUN_GRACE_MS

run -n 4 /nonexistent/braid-program
check "exec failure" '[[ $rc == 127 && $(grep -c "/nonexistent/braid-program" "$TMP/err") == 1 ]]'

# Segments named as braid's shm transport names them (/dev/shm/braid-<creator pid>-...): a rank's go when it exits,
# killed or not; another job's (here under the script's own pid) stay.
if [[ -d /dev/shm && -w /dev/shm ]]; then
  foreign=/dev/shm/braid-$$-braidrun-test-other-job
  : >"$foreign"
  rm -f "$TMP"/pid.*
  run -n 2 sh -c 'echo $$ > "$0/pid.$BRAID_RANK"; : > /dev/shm/braid-$$-a; : > /dev/shm/braid-$$-b
    [ $BRAID_RANK = 1 ] && kill -9 $$; exit 0' "$TMP"
  left=$(find /dev/shm -maxdepth 1 -name "braid-$(cat "$TMP/pid.0")-*" -o -name "braid-$(cat "$TMP/pid.1")-*" | wc -l)
  check "segments of exited and killed ranks removed" '[[ $rc == 137 && $left == 0 ]]'
  check "removal reported" 'grep -qE "^braidrun: removed 2 shared-memory segment\(s\) that rank 1 \(pid [0-9]+\) left" "$TMP/err"'
  check "another job's segment kept" '[[ -e $foreign ]]'
  rm -f "$foreign"
fi

run --timeout 0.5 -n 2 sleep 30
check "timeout" '[[ $rc == 124 ]] && grep -q "timeout" "$TMP/err" && (( elapsed_ms < 5000 ))'

# --- signals -------------------------------------------------------------------------------------------------------
rm -f "$TMP"/ready.*
start_bg -n 2 sh -c 'trap "echo int-$BRAID_RANK; exit 0" INT; touch "$0/ready.$BRAID_RANK"; while :; do sleep 0.1; done' "$TMP"
wait_files 2 "$TMP/ready"
kill -INT "$bg"
finish_bg
check "SIGINT forwarded" '[[ $rc == 130 && $(sort "$TMP/out" | tr "\n" ,) == "int-0,int-1," ]]'

rm -f "$TMP"/ready.*
start_bg -n 2 sh -c 'trap "" INT; touch "$0/ready.$BRAID_RANK"; exec sleep 30' "$TMP"
wait_files 2 "$TMP/ready"
kill -INT "$bg"
sleep 0.3
kill -INT "$bg"
finish_bg
check "second SIGINT kills" '[[ $rc == 130 ]] && grep -q "again; sending SIGKILL" "$TMP/err" && (( elapsed_ms < 8000 ))'

rm -f "$TMP"/ready.*
start_bg -n 2 sh -c 'touch "$0/ready.$BRAID_RANK"; exec sleep 30' "$TMP"
wait_files 2 "$TMP/ready"
kill -TERM "$bg"
finish_bg
check "SIGTERM forwarded" '[[ $rc == 143 ]] && grep -q "got SIGTERM" "$TMP/err" && (( elapsed_ms < 8000 ))'

echo "braidrun: $passed checks passed"
if ((failed > 0)); then
  echo "braidrun: $failed checks FAILED" >&2
  exit 1
fi
