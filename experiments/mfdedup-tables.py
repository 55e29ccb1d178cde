#!/usr/bin/env python3
"""Tables of an MFDedup experiment (mfdedup-tos Figs. 11-18) from its
results.csv (or .csv.zst, .csv.gz): python3 experiments/mfdedup-tables.py experiments/results/NAME/results.csv.zst"""
import csv, statistics as st, sys
from collections import defaultdict

import gzip, io, subprocess


def opener(path):
    if path.endswith(".zst"):
        text = subprocess.run(["zstd", "-dc", path], check=True, capture_output=True).stdout
        return io.StringIO(text.decode())
    return gzip.open(path, "rt") if path.endswith(".gz") else open(path)


rows = list(csv.DictReader(opener(sys.argv[1])))
f = lambda r, k: float(r[k]) if r.get(k) not in (None, "") else 0.0
approaches = list(dict.fromkeys(r["approach"] for r in rows))
by = defaultdict(lambda: defaultdict(list))
for r in rows:
    by[r["approach"]][r["kind"]].append(r)
steps = max(int(r["step"]) for r in rows) + 1
MB = 1e6

def state_after(a):
    """dedup ratio after each step: the GC row of the step if any, else the backup row"""
    out = {}
    for r in by[a]["backup"]:
        out[int(r["step"])] = f(r, "dedup_ratio")
    for r in by[a]["gc"]:
        out[int(r["step"])] = f(r, "dedup_ratio")
    return out

print("### Actual deduplication ratio over versions (Fig. 11)\n")
marks = sorted(set([steps // 4, steps // 2, 3 * steps // 4, steps - 1]))
print("| approach | " + " | ".join(f"after {m + 1}" for m in marks) + " |")
print("|---|" + "---|" * len(marks))
for a in approaches:
    s = state_after(a)
    print(f"| {a} | " + " | ".join(f"{s.get(m, 0):.2f}" for m in marks) + " |")

print("\n### Restores (Figs. 13-15)\n")
print("| approach | newest: mean RA | newest: mean seeks | retained at end: mean RA | max RA | mean seeks | max seeks | mean MB/s |")
print("|---|---|---|---|---|---|---|---|")
for a in approaches:
    rs = by[a]["restore"]
    new = [r for r in rs if r["when"] == "newest"]
    fin = [r for r in rs if r["when"] == "final"]
    seeks = lambda r: f(r, "seeks") if r.get("seeks") else f(r, "containers_read")
    m = lambda xs, g: st.mean(map(g, xs)) if xs else 0
    print(f"| {a} | {m(new, lambda r: f(r,'read_amplification')):.3f} | {m(new, seeks):.1f} | "
          f"{m(fin, lambda r: f(r,'read_amplification')):.3f} | {max([f(r,'read_amplification') for r in fin] or [0]):.3f} | "
          f"{m(fin, seeks):.1f} | {max([seeks(r) for r in fin] or [0]):.0f} | {m(fin, lambda r: f(r,'throughput_mb_s')):.0f} |")

print("\n### Backup throughput and index memory (Fig. 12, §5.3)\n")
print("| approach | backup MB/s | index memory at 25% / 50% / end of versions | NDF index memory max |")
print("|---|---|---|---|")
for a in approaches:
    b = sorted(by[a]["backup"], key=lambda r: int(r["step"]))
    logical = sum(f(r, "logical_bytes") for r in b)
    secs = sum(f(r, "seconds") for r in b)
    mem = [f(r, "index_memory_bytes") for r in b]
    ndf = max([f(r, "ndf_memory_bytes") for r in b] or [0])
    pick = lambda i: mem[min(i, len(mem) - 1)] / MB
    print(f"| {a} | {logical / MB / secs:.0f} | {pick(len(mem)//4):.2f} / {pick(len(mem)//2):.2f} / {pick(len(mem)-1):.2f} MB | "
          + (f"{ndf / MB:.2f} MB |" if ndf else "— |"))

print("\n### Arranging against GC (Fig. 16)\n")
print("| approach | GC/deletion rounds | GC or deletion s total | mean s per round | arranging s total | mean s per backup | stdev | bytes copied by GC |")
print("|---|---|---|---|---|---|---|---|")
for a in approaches:
    g = by[a]["gc"]
    b = by[a]["backup"]
    gs = [f(r, "total_seconds") for r in g]
    ar = [f(r, "arrange_seconds") for r in b]
    print(f"| {a} | {len(g)} | {sum(gs):.2f} | {st.mean(gs) if gs else 0:.3f} | {sum(ar):.2f} | {st.mean(ar) if ar else 0:.3f} | "
          f"{st.pstdev(ar) if ar else 0:.3f} | {sum(f(r,'bytes_written') for r in g) / MB:.1f} MB |")

for a in approaches:
    b = [r for r in by[a]["backup"] if r.get("chain")]
    if not b or a != "mfdedup":
        continue
    print(f"\n### Volume and active-category sizes per chain, {a} (Fig. 17)\n")
    chains = sorted(set(r["chain"] for r in b))
    print("| chain | newest volume MB (every 5th version) | active MB at end |")
    print("|---|---|---|")
    for c in chains:
        cb = [r for r in b if r["chain"] == c]
        vols = [f"{f(r, 'newest_volume_bytes') / MB:.2f}" for r in cb[::5]]
        print(f"| {c} | {' '.join(vols)} | {f(cb[-1], 'active_bytes') / MB:.2f} |")

print("\n### Read amplification when arranging falls behind (Fig. 18)\n")
print("| approach | versions behind | newest: mean RA | newest: mean categories | retained at end: mean RA |")
print("|---|---|---|---|---|")
for a in approaches:
    if not a.startswith("mfdedup"):
        continue
    lag = a.split(":")[1] if ":" in a else "0"
    rs = by[a]["restore"]
    new = [r for r in rs if r["when"] == "newest"]
    fin = [r for r in rs if r["when"] == "final"]
    print(f"| {a} | {lag} | {st.mean(f(r,'read_amplification') for r in new):.3f} | "
          f"{st.mean(f(r,'categories') for r in new):.1f} | {st.mean(f(r,'read_amplification') for r in fin):.3f} |")
