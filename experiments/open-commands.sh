#!/usr/bin/env bash
# Issue 36: what single commands cost on a large repository, before any work.
# Builds two trace-mode repositories (index disk and memory) with the lab's
# trace benchmark on the local backend, then times snapshots, stats, ls,
# forget --dry-run and a one-chunk backup on each, with every binary given.
#
#   experiments/open-commands.sh WORK VERSIONS SIZE BIN [BIN...]
#   e.g. experiments/open-commands.sh /tmp/open36 4 24GiB ./tessera-before ./tessera
#
# The repositories are built once with the first binary (the format is the
# same); each command runs three times per binary, interleaved, and every
# time is printed (seconds, wall clock). The one-chunk backup runs last for
# each binary (it adds a generation the next binary's opening applies).
set -euo pipefail
work=$1 versions=$2 size=$3
shift 3
bins=("$@")
mkdir -p "$work"
export TESSERA_CACHE_DIR="$work/cache"
for index in disk memory; do
  dir="$work/$index"
  if [ ! -d "$dir/repos" ]; then
    "${bins[0]}" lab bench --trace --local --index "$index" --versions "$versions" \
      --size "$size" --runs 1 --dir "$dir" --json > "$work/build-$index.json"
  fi
done
printf '0000000000000000000000000000000000000000000000000000000000abcdef 8192\n' > "$work/one.trace"
t() { # binary, subcommand, arguments...
  local s e
  s=$(date +%s.%N)
  "$@" > /dev/null 2>&1 || echo "  (failed: $*)"
  e=$(date +%s.%N)
  printf '%-16s %-10s %6.3f s\n' "$(basename "$1")" "$2" "$(echo "$e - $s" | bc)"
}
for index in disk memory; do
  repo=$(ls -d "$work/$index"/repos/*/ | head -1)
  id=$("${bins[0]}" snapshots -r "$repo" --json 2>/dev/null | grep -o '"id": *[0-9]*' | head -1 | grep -o '[0-9]*$' || echo 1)
  echo "== $index index: $repo"
  for round in 1 2 3; do
    for b in "${bins[@]}"; do
      t "$b" snapshots -r "$repo" 
      t "$b" stats -r "$repo" 
      t "$b" ls -r "$repo" "$id"
      t "$b" forget -r "$repo" --keep-last 1 --dry-run
    done
  done
  for b in "${bins[@]}"; do
    for round in 1 2 3; do
      t "$b" backup -r "$repo" --trace-file "$work/one.trace"
    done
  done
done
