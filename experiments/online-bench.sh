#!/bin/bash
# Issue 15: backup throughput while a throttled online GC runs, as a ratio of
# the same backup alone. Usage: experiments/online-bench.sh TESSERA [WORK] [RUNS]
#
# Setup: six 32 MiB random segments S1..S6; backups b1..b3 hold (S1,S2),
# (S3,S4), (S5,S6) interleaved in 256 KiB blocks, so every container mixes a
# segment that stays live with one that dies; b4 holds S1+S3+S5 and is kept;
# b1..b3 are forgotten. The measured backup X is 160 MiB: S1+S3+half of S5
# (80 MiB deduplicated against chunks sitting in containers GC copies) and
# 80 MiB new. Each run backs X up into a fresh copy of that repository,
# alone, then while `gc --mark physical --max-read-rate 40MiB
# --max-write-rate 40MiB` runs (started 0.3 s before the backup).
set -euo pipefail
T=$(realpath "$1"); W=${2:-/tmp/online-bench}; RUNS=${3:-5}
export TESSERA_PASSWORD=bench
rm -rf "$W"; mkdir -p "$W/data"
python3 - "$W/data" <<'PY'
import os, sys
d = sys.argv[1]; M = 1 << 20; B = 256 << 10
seg = [os.urandom(32 * M) for _ in range(6)]
def inter(a, b):
    out = bytearray()
    for i in range(0, len(a), B):
        out += a[i:i+B] + b[i:i+B]
    return bytes(out)
for k in range(3):
    open(f"{d}/b{k+1}", "wb").write(inter(seg[2*k], seg[2*k+1]))
open(f"{d}/b4", "wb").write(seg[0] + seg[2] + seg[4])
open(f"{d}/x", "wb").write(seg[0] + seg[2] + seg[4][:16 * M] + os.urandom(80 * M))
PY
R0="$W/base"
$T init --repo "$R0" -q
for b in b1 b2 b3 b4; do $T backup --repo "$R0" -q "$W/data/$b" >/dev/null; done
for id in $($T snapshots --repo "$R0" --json | python3 -c 'import json,sys; print(" ".join(str(s["id"]) for s in json.load(sys.stdin) if not s["paths"][0].endswith("b4")))'); do
  $T forget --repo "$R0" -q "$id" >/dev/null
done
now() { date +%s.%N; }
echo "run alone_s with_gc_s ratio gc_s"
for run in $(seq 1 "$RUNS"); do
  rm -rf "$W/r1" "$W/r2"; cp -a "$R0" "$W/r1"; cp -a "$R0" "$W/r2"; sync
  cat "$W/data/x" > /dev/null
  a0=$(now); $T backup --repo "$W/r1" -q "$W/data/x" >/dev/null; a1=$(now)
  sync; cat "$W/data/x" > /dev/null
  g0=$(now)
  $T gc --repo "$W/r2" -q --mark physical --max-read-rate 40MiB --max-write-rate 40MiB >/dev/null &
  gc=$!
  sleep 0.3
  b0=$(now); $T backup --repo "$W/r2" -q "$W/data/x" >/dev/null; b1=$(now)
  wait $gc; g1=$(now)
  $T check --repo "$W/r2" -q >/dev/null
  python3 -c "a=$a1-$a0; b=$b1-$b0; print($run, round(a,3), round(b,3), round(a/b,3), round($g1-$g0,2))"
done
rm -rf "$W"
