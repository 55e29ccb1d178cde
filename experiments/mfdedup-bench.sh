#!/bin/bash
# Restore throughput of the newest version against a sequential read of the
# same bytes, and arranging throughput, on the mfdedup layout (warm cache).
set -e
T=${T:-target/release/tessera}
D=/tmp/mfdedup-bench; rm -rf $D; mkdir -p $D
SIZE_MB=${SIZE_MB:-512}
python3 - "$D" "$SIZE_MB" <<'PY'
import os, random, sys
d, mb = sys.argv[1], int(sys.argv[2])
random.seed(1)
data = bytearray(os.urandom(mb << 20))
for v in range(1, 6):
    for _ in range(40):  # 40 edits of 64 KiB per version (~0.5 % changed)
        at = random.randrange(len(data) - 65536)
        data[at:at + 65536] = os.urandom(65536)
    open(f"{d}/v{v}", "wb").write(data)
PY
R="--repo $D/repo"
$T init $R --layout mfdedup >/dev/null
for v in 1 2 3 4; do $T backup $R $D/v$v --source img --json > $D/b$v.json; done
$T backup $R $D/v5 --source img --no-arrange --json > $D/b5.json
cat $D/repo/containers/* > /dev/null
$T arrange $R --json > $D/arrange.json
python3 -c "import json; a=json.load(open('$D/arrange.json'))[0]; print(f\"arranging: {a['read_bytes']/1e6:.0f} MB of active categories in {a['seconds']:.2f} s = {a['read_bytes']/1e6/a['seconds']:.0f} MB/s (kept {a['kept_bytes']/1e6:.0f} MB, archived {a['archived_bytes']/1e6:.1f} MB)\")"
for b in 1 2 3 4 5; do python3 -c "import json; b=json.load(open('$D/b$b.json')); print(f\"backup {b['backup']['id']}: {b['throughput_mb_s']:.0f} MB/s, NDF {b['ndf_memory_bytes']/1e6:.2f} MB\")"; done
for i in 1 2 3; do
  cat $D/repo/containers/* > /dev/null; cat $D/v5 > /dev/null
  s=$(date +%s.%N); cat $D/v5 > /dev/null; e=$(date +%s.%N)
  seq=$(python3 -c "print(f'{($SIZE_MB*1048576)/1e6/($e-$s):.0f}')")
  rm -rf $D/out
  $T restore $R latest --target $D/out --json > $D/r.json
  python3 -c "import json; r=json.load(open('$D/r.json')); r=r.get('restore', r); print(f\"run $i: restore newest {r['throughput_mb_s']:.0f} MB/s ({r['seconds']:.2f} s, RA {r['read_amplification']:.3f}, {r['mfdedup']['categories']} categories, {r['mfdedup']['seeks']} runs) vs sequential read of the same bytes $seq MB/s\")"
  cmp $D/out/v5 $D/v5
done

# Cold-cache runs (the page cache here is evicted after ~30 s idle).
for i in 1 2; do
  sleep 40; s=$(date +%s.%N); cat $D/v5 > /dev/null; e=$(date +%s.%N)
  echo "cold sequential read of v5 (537 MB): $(python3 -c "print(f'{536870912/1e6/($e-$s):.0f}')") MB/s"
  sleep 40; s=$(date +%s.%N); cat $D/repo/containers/* > /dev/null; e=$(date +%s.%N)
  echo "cold sequential read of every container object: $(du -sb $D/repo/containers | cut -f1) bytes, $(python3 -c "print(f'{$(du -sb $D/repo/containers | cut -f1)/1e6/($e-$s):.0f}')") MB/s"
  sleep 40; rm -rf $D/out
  $T restore $R latest --target $D/out --json > $D/r.json
  python3 -c "import json; r=json.load(open('$D/r.json')); r=r.get('restore', r); print(f\"cold restore newest (with fsync): {r['throughput_mb_s']:.0f} MB/s ({r['seconds']:.2f} s)\")"
  cmp $D/out/v5 $D/v5 && echo identical
done
