# shellcheck shell=bash disable=SC2154  # $top and $OUT are the sourcing script's
# Sourced by perf/compare_peers.sh and perf/netns_peers.sh (with $top, this checkout, and $OUT, the results
# folder, set): builds a copy of ../shared/peers (which may be read-only) in a temporary folder removed on
# exit, cds into it and loads its measure(), then makes $OUT.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$top/../shared/peers" "$work/"
cd "$work/peers" && ./build.sh >/dev/null || { echo "building the peers failed"; exit 1; }
. ./lib_measure.sh
mkdir -p "$OUT"
