#!/usr/bin/env bash
# Issue 36: what single commands cost on a large repository, before any work.
# Builds the issue's repository twice (index disk and memory): the series of
# experiments/index-disk.toml (the scale generator, 64 GiB versions at
# 8 KiB, 25 % of the chunks new per version) cut to VERSIONS versions of
# SIZE, in trace mode on the local backend, with `tessera lab run`; then
# times snapshots, stats, ls, forget --dry-run, a one-chunk backup and a
# GC on each, with every binary given.
#
#   experiments/open-commands.sh WORK VERSIONS SIZE BIN [BIN...]
#   e.g. experiments/open-commands.sh /tmp/open36 4 64GiB ./tessera-before ./tessera
#   (4 x 64 GiB: 14.2 M index entries, ~3 GB of repository per index kind)
#
# The repositories are built once with the first binary (the format is the
# same). Each command runs three times per binary, interleaved, and every
# time is printed (seconds, wall clock; user + system CPU seconds). The
# one-chunk backups run after the listings (each adds a generation the next
# opening applies): a new chunk (a new index segment) and a chunk already
# stored (none). On the disk index, a GC (a forget of the oldest backup
# first) runs once per binary at the end, followed by the first opening
# after it (a one-chunk backup: the kept run set reused or rebuilt). Set OPEN_GC=0 to leave the GC out, OPEN_BUILD_ONLY=1 to
# stop once the repositories are built.
set -euo pipefail
work=$1 versions=$2 size=$3
shift 3
bins=("$@")
mkdir -p "$work"
work=$(cd "$work" && pwd)
export TESSERA_CACHE_DIR="$work/cache"
for index in disk memory; do
  dir="$work/$index"
  if [ ! -d "$dir/work/repos/naive" ]; then
    cat > "$work/$index.toml" <<EOF
name = "open-commands-$index"
mode = "trace"
approaches = ["naive"]

[dataset.scale]
seed = 1
versions = $versions
version_size = "$size"
chunk_size = "8KiB"
change_rate = 0.25

[repo]
chunker = "fastcdc:2k/8k/64k"
container_size = "4MiB"
index = "$index"
backend = "local"

[restore]
retained_at_end = false
EOF
    "${bins[0]}" lab run "$work/$index.toml" --out "$dir" --json > "$work/build-$index.json"
  fi
done
[ "${OPEN_BUILD_ONLY:-0}" = 1 ] && exit 0
# A one-chunk trace: a fingerprint no series chunk has, then a stored one.
new_trace() { printf '%064x 8192\n' "$1" > "$work/one.trace"; }
t() { # label, binary, subcommand, arguments...
  local label=$1 s e
  shift
  s=$(date +%s.%N)
  /usr/bin/time -f '%U %S' -o "$work/time.out" "$@" > /dev/null 2> "$work/err.out" ||
    echo "  (failed: $* : $(tail -1 "$work/err.out"))"
  e=$(date +%s.%N)
  printf '%-16s %-22s %6.3f s  cpu %s s\n' "$(basename "$1")" "$label" "$(echo "$e - $s" | bc)" \
    "$(tail -1 "$work/time.out" | awk '{printf "%.2f", $1 + $2}')"
}
n=0
for index in disk memory; do
  repo="$work/$index/work/repos/naive"
  echo "== $index index: $repo ($(du -sh "$repo" | cut -f1))"
  for round in 1 2 3; do
    for b in "${bins[@]}"; do
      id=$("$b" snapshots -r "$repo" --json | grep -o '"id": *[0-9]*' | head -1 | grep -o '[0-9]*$')
      t snapshots "$b" snapshots -r "$repo"
      t stats "$b" stats -r "$repo"
      t ls "$b" ls -r "$repo" "$id"
      t forget-dry-run "$b" forget -r "$repo" --keep-last 1 --dry-run
    done
  done
  for round in 1 2 3; do
    for b in "${bins[@]}"; do
      n=$((n + 1))
      new_trace $((0xabc000 + n))
      t backup-new-chunk "$b" backup -r "$repo" --trace-file "$work/one.trace"
      t backup-stored-chunk "$b" backup -r "$repo" --trace-file "$work/one.trace"
    done
  done
  if [ "${OPEN_GC:-1}" != 0 ] && [ "$index" = disk ]; then
    for b in "${bins[@]}"; do
      id=$("$b" snapshots -r "$repo" --json | grep -o '"id": *[0-9]*' | head -1 | grep -o '[0-9]*$')
      t forget-oldest "$b" forget -r "$repo" "$id"
      t gc "$b" gc -r "$repo"
      n=$((n + 1))
      new_trace $((0xabc000 + n))
      t backup-after-gc "$b" backup -r "$repo" --trace-file "$work/one.trace"
      t backup-after-that "$b" backup -r "$repo" --trace-file "$work/one.trace"
    done
  fi
done
