#!/bin/sh
# Replays every committed corpus through its target (the fuzz-corpus test).
# Usage: replay_corpus.sh CORPUS_ROOT REPLAY_BINARY...   (replay_<target> reads CORPUS_ROOT/<target>)
root=$1
shift
status=0
for bin in "$@"; do
  target=$(basename "$bin")
  target=${target#replay_}
  "$bin" "$root/$target" || { echo "fuzz-corpus: $target FAILED"; status=1; }
done
exit $status
