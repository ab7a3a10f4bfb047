#!/usr/bin/env bash
# Checks of tests/netns/run.sh itself: the failing host's status comes back and is named, --rate puts a
# tbf on the link, SIGTERM removes the namespaces and ends what ran in them, and an unprivileged caller
# gets the skip status. Usage: test_run.sh (as root; exits 77 where namespaces cannot be made).
set -uo pipefail
run=$(cd "$(dirname "$0")" && pwd)/run.sh
passed=0 failed=0
check() {  # NAME CONDITION (evaluated now)
  if eval "$2"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: $1 [$2] rc=$rc" >&2; sed 's/^/  /' "$err" >&2; fi
}
ours() { ip netns list 2>/dev/null | grep -c '^braidnet' || true; }
err=$(mktemp)
trap 'rm -f "$err"' EXIT

"$run" 1 1 --exec -- true 2>"$err"
rc=$?
[ $rc = 77 ] && { cat "$err" >&2; exit 77; }
before=$(ours)

# shellcheck disable=SC2016  # expanded in each namespace
"$run" 3 1 --exec -- sh -c '[ "$NETNS_HOST" != 2 ] || exit 3' 2>"$err"
rc=$?
check "a host's failure is the job's status" '[ $rc = 3 ]'
check "the failing host is named" 'grep -q "host 2 .*failed with status 3" "$err"'
check "nothing is left behind" '[ "$(ours)" = "$before" ]'

"$run" 2 1 --rate 1gbit --exec -- sh -c 'tc qdisc show dev veth0 | grep -q "tbf.*rate 1Gbit"' 2>"$err"
rc=$?
check "--rate limits every host's link" '[ $rc = 0 ]'

"$run" 2 1 -- /bin/sleep 60 2>"$err" &
job=$!
for ((i = 0; i < 100 && $(ours) < before + 3; i++)); do sleep 0.1; done
check "the namespaces exist while the job runs" '[ "$(ours)" = $((before + 3)) ]'
sleep 0.5
inside=$(ip netns pids "braidnet$job-h0"; ip netns pids "braidnet$job-h1")  # braidruns and ranks
check "the ranks run in the namespaces" '[ "$(echo "$inside" | wc -w)" -ge 4 ]'
kill -TERM $job
wait $job
rc=$?
check "SIGTERM is 143" '[ $rc = 143 ]'
check "SIGTERM removes the namespaces" '[ "$(ours)" = "$before" ]'
alive=0
# shellcheck disable=SC2034  # read by the eval in check
for p in $inside; do kill -0 "$p" 2>/dev/null && alive=1; done
check "SIGTERM ends what ran in them" '[ $alive = 0 ]'

if command -v setpriv >/dev/null; then
  setpriv --reuid=65534 --regid=65534 --clear-groups "$run" 1 1 -- true 2>"$err"
  rc=$?
  check "not root: skip" '[ $rc = 77 ] && grep -q "need root" "$err"'
fi

echo "test_run.sh: $passed passed, $failed failed"
[ $failed = 0 ]
