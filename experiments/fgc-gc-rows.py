#!/usr/bin/env python3
"""Pack the issue-31 FGC / physical-GC results for the repository: per
experiment (experiments/results/NAME), results.csv.zst (every row; for the
100,000-backup runs only the GC rows, the backup rows being 115 MB), the
report.html if small, and gc-rows.md: each GC row with the focused mark's
memory split (focus.* fields, only in results.jsonl) and the run's stamp.

Usage: experiments/fgc-gc-rows.py NAME...
"""
import csv
import io
import json
import os
import subprocess
import sys

BIG = 2 << 20
csv.field_size_limit(sys.maxsize)
COLS = [
    ("approach", "approach"), ("mark_ran", "ran"), ("mark_seconds", "mark s"),
    ("mark_bytes_read", "recipe bytes read"), ("mark_containers_read", "container reads"),
    ("mark_seeks", "seeks"), ("mark_metadata_reads", "metadata reads"),
    ("chunk_queries", "chunk queries"), ("liveness_array_bytes", "liveness array B"),
    ("mark_memory_bytes", "mark memory B"), ("focus.graph_bytes", "graph edges B"),
    ("focus.base_map_bytes", "base map B"), ("focus.correlative_backups", "correlative backups"),
    ("focus.focus_estimate_bytes", "focus est. B"), ("focus.full_estimate_bytes", "full est. B"),
    ("focus.focus_estimate_entry_bytes", "focus est. entries B"),
    ("focus.full_estimate_entry_bytes", "full est. entries B"),
    ("backend_requests", "requests"), ("backend_bytes_read", "bytes read"),
    ("reclaimed_containers", "reclaimed"),
]


def field(row, key):
    v = row
    for k in key.split("."):
        v = v.get(k, "") if isinstance(v, dict) else ""
    if isinstance(v, float):
        return f"{v:.3f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def pack(name):
    d = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", name)
    rows, stamp = [], {}
    for line in open(os.path.join(d, "results.jsonl")):
        r = json.loads(line)
        if r.get("kind") == "run":
            stamp = r.get("stamp", {})
        if r.get("kind") == "gc":
            rows.append(r)
    src = os.path.join(d, "results.csv")
    if os.path.exists(src):
        big = os.path.getsize(src) > BIG
        out = io.StringIO(newline="")
        with open(src, newline="") as f:
            rd, wr = csv.reader(f), csv.writer(out)
            head = next(rd)
            wr.writerow(head)
            for r in rd:
                if not big or r[0] != "backup":
                    wr.writerow(r)
        subprocess.run(["zstd", "-19", "-q", "-f", "-o", src + ".zst"],
                       input=out.getvalue().encode(), check=True)
        os.remove(src)
    html = os.path.join(d, "report.html")
    if os.path.exists(html) and os.path.getsize(html) > BIG:
        os.remove(html)
    with open(os.path.join(d, "gc-rows.md"), "w") as out:
        out.write(f"# {name}: GC rows\n\nstamp: {json.dumps(stamp)}\n\n")
        out.write("| " + " | ".join(h for _, h in COLS) + " |\n")
        out.write("|" + "---|" * len(COLS) + "\n")
        for r in rows:
            out.write("| " + " | ".join(field(r, k) for k, _ in COLS) + " |\n")


for n in sys.argv[1:]:
    pack(n)
