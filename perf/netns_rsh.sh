#!/usr/bin/env bash
# Open MPI's remote launcher for the netns test bed (tests/netns/run.sh --exec): mpirun, running in host
# 0's namespace, starts its daemon on "host" 10.213.0.K+1 through this script instead of ssh
# (--mca plm_rsh_agent), which runs the daemon's command line in namespace $NETNS_PREFIX$K.
# Usage (by Open MPI): netns_rsh.sh [ssh-style options] HOST COMMAND...
set -euo pipefail
while [[ $# -gt 0 && $1 == -* ]]; do shift; done  # options Open MPI adds for ssh-like agents (-x)
host=${1:?netns_rsh.sh: no host}
shift
[[ $host =~ ^10\.213\.0\.([0-9]+)$ ]] || { echo "netns_rsh.sh: '$host' is not a test-bed address" >&2; exit 1; }
k=$((BASH_REMATCH[1] - 1))
exec ip netns exec "${NETNS_PREFIX:?netns_rsh.sh: NETNS_PREFIX unset (run under tests/netns/run.sh --exec)}$k" \
  /bin/sh -c "$*"
