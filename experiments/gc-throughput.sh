#!/bin/bash
# Issue 15: GC throughput per mark, in GB/s of involved containers, data mode.
# Usage: experiments/gc-throughput.sh TESSERA [WORK]
# Six 32 MiB random segments; backups b1..b3 hold (S1,S2),(S3,S4),(S5,S6)
# interleaved in 256 KiB blocks, b4 holds S1+S3+S5 and stays; b1..b3 are
# forgotten, so every container is half live (copied) and half dead. Each mark
# (with each sweep) runs on a fresh copy of that repository, unthrottled.
set -euo pipefail
T=$(realpath "$1"); W=${2:-/tmp/gc-throughput}
export TESSERA_PASSWORD=bench
rm -rf "$W"; mkdir -p "$W/data"
python3 - "$W/data" <<'PY'
import os, sys
d = sys.argv[1]; M = 1 << 20; B = 256 << 10
seg = [os.urandom(32 * M) for _ in range(6)]
for k in range(3):
    out = bytearray()
    for i in range(0, 32 * M, B):
        out += seg[2*k][i:i+B] + seg[2*k+1][i:i+B]
    open(f"{d}/b{k+1}", "wb").write(out)
open(f"{d}/b4", "wb").write(seg[0] + seg[2] + seg[4])
PY
R0="$W/base"
$T init --repo "$R0" -q >/dev/null
for b in b1 b2 b3 b4; do $T backup --repo "$R0" -q "$W/data/$b" >/dev/null; done
$T forget --repo "$R0" -q 1 2 3 >/dev/null
echo "mark strategy involved_MB seconds GB_per_s mark_s"
for strategy in naive gccdf; do
  for mark in logical physical physical+; do
    rm -rf "$W/r"; cp -a "$R0" "$W/r"; sync; find "$W/r" -type f -print0 | xargs -0 cat >/dev/null
    $T gc --repo "$W/r" --mark "$mark" --strategy "$strategy" --json | python3 -c "
import json,sys; d=json.load(sys.stdin)
print('$mark', '$strategy', round(d['involved_bytes']/1e6,1), round(d['total_seconds'],3), round(d['involved_bytes']/1e9/d['total_seconds'],2), round(d['mark_seconds'],4))"
    $T check --repo "$W/r" -q >/dev/null
  done
done
rm -rf "$W"
