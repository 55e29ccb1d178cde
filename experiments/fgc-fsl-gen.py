#!/usr/bin/env python3
"""FGC's many-files workload (fgc-focused-gc.md §5, issue 31): one
primary-storage snapshot of N files, each file one trace (a Tessera
backup is the paper's "file": the reference graph links backups).

Modelled on what the paper reports of its FSL snapshots (Table II, Fig. 3):
deduplication ratio 36-61 %, over 95 % of files with at most one base
correlative file. A file is, in creation order:
  - with probability COPY, a copy of a uniformly chosen earlier file with
    each chunk replaced with probability EDIT (a near-duplicate: it
    deduplicates against that one file, its base);
  - otherwise new chunks only;
and with probability COMMON it also holds one of a small pool of common
chunks (file headers, zero blocks: the paper's "common referenced data").
File sizes are log-uniform in 1..MAXCH chunks of 2-14 KiB (fastcdc-like).

With PER > 1, each trace holds PER consecutive files (a large backup the
focused mark can cut into virtual files, §IV-F); the chunks are the same.

Usage: fgc-fsl-gen.py OUTDIR [N] [SEED] [PER]   (deterministic in SEED)
"""
import hashlib
import math
import os
import random
import sys

COPY, EDIT, COMMON, POOL, MAXCH = 0.45, 0.10, 0.02, 64, 64


def main():
    out = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 31
    rng = random.Random(seed)
    per = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    os.makedirs(out, exist_ok=True)
    counter = [0]

    def new_chunk():
        counter[0] += 1
        # Fingerprints must look random: the index and the marks' tables
        # hash their leading bytes.
        fp = hashlib.sha1(f"{seed}:{counter[0]}".encode()).hexdigest()
        return (fp, rng.randint(2048, 14336))

    common = [new_chunk() for _ in range(POOL)]
    files, refs, uniq = [], 0, set()
    for i in range(n):
        if files and rng.random() < COPY:
            base = files[rng.randrange(len(files))]
            chunks = [new_chunk() if rng.random() < EDIT else c for c in base]
        else:
            k = int(math.exp(rng.uniform(0, math.log(MAXCH))))
            chunks = [new_chunk() for _ in range(max(1, k))]
        if rng.random() < COMMON:
            chunks = [common[rng.randrange(POOL)]] + chunks
        files.append(chunks)
        refs += len(chunks)
        uniq.update(c[0] for c in chunks)
        name = os.path.join(out, f"{i // per:06d}-files.trace")
        with open(name, "a" if i % per else "w") as f:
            if i % per == 0:
                f.write(f"# tessera trace v1: <hex fingerprint> <size>; source=fsl-like files {i}..\n")
            f.writelines(f"{h} {s}\n" for h, s in chunks)
    print(f"{n} files, {refs} chunk references, {len(uniq)} unique chunks, "
          f"dedup ratio {1 - len(uniq) / refs:.1%}")


if __name__ == "__main__":
    main()
