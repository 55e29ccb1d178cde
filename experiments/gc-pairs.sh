#!/usr/bin/env bash
# Interleaved GC pairs on fresh copies of one memory-index repository
# (the issue-36 repository after a forget of backup 1).
#   GC_PAIRS_DIR=DIR experiments/gc-pairs.sh LABEL_A BIN_A LABEL_B BIN_B PAIRS (A first in odd pairs)
# Each run: copy master -> run/repo (same path every time: the kept table is
# keyed to repository and location), restore the cache directory prepared
# for that binary (kept table of the pre-GC generation, if any), read the
# copy and the cache right before (warm), then time `gc` alone.
set -euo pipefail
S=${GC_PAIRS_DIR:?set GC_PAIRS_DIR: master/repo is the repository after a forget, cache-LABEL an optional cache directory per label}
la=$1 a=$2 lb=$3 b=$4 pairs=$5
export TESSERA_CACHE_DIR=$S/run/cache
one() { # label bin pair
  local label=$1 bin=$2 pair=$3
  rm -rf $S/run; mkdir -p $S/run/cache
  cp -a $S/master/repo $S/run/repo
  if [ -e $S/cache-$label ]; then cp -a $S/cache-$label/. $S/run/cache; fi
  find $S/run/cache -type f -name 'data-*' | wc -l > $S/tables.before
  find $S/run -type f -exec cat {} + > /dev/null
  local l=$(cut -d' ' -f1-3 /proc/loadavg)
  local s=$(date +%s.%N)
  /usr/bin/time -v -o $S/time.out $bin gc -r $S/run/repo > $S/gc.out 2>&1
  local e=$(date +%s.%N)
  local kb=$(cat $S/tables.before) ka=$(find $S/run/cache -type f -name 'data-*' | wc -l)
  local u=$(grep 'User time' $S/time.out | awk '{print $NF}')
  local y=$(grep 'System time' $S/time.out | awk '{print $NF}')
  local r=$(grep 'Maximum resident' $S/time.out | awk '{print $NF}')
  local mf=$(grep 'Minor' $S/time.out | awk '{print $NF}')
  printf '%s pair %d %-8s wall %7.2f user %6.2f sys %6.2f peak %5d MB minflt %s kept %s->%s load %s at %s\n' \
    "$(date -u +%H:%M:%S)" $pair $label "$(echo "$e - $s" | bc)" $u $y $((r/1024)) $mf "$kb" "$ka" "$l" "$(tail -1 $S/gc.out | cut -c1-60)"
}
for p in $(seq 1 $pairs); do
  if [ $((p % 2)) = 1 ]; then one $la $a $p; one $lb $b $p; else one $lb $b $p; one $la $a $p; fi
done
rm -rf $S/run
