#!/usr/bin/env python3
"""The house check: no import circle among a crate's source files.

An arrow A -> B means file A names an item of module file B: through a
`use` path (`crate::`, `super::`, `self::`, or a child module's name) or an
inline path in code. A path points at the module it names, as written:
`crate::backend::ObjectKey` points at backend/mod.rs even where that file
only re-exports it, because it then depends on that file. `mod x;` lines
and `#[cfg(test)]` modules are not arrows (tests may reach anywhere).

Two graphs must have no circle:
  * files: the arrows above (a mod.rs that re-exports its children must
    not define what they use; children import their siblings directly);
  * rooms: a crate's top-level modules (a folder counts as one room), so
    that the layers stay layers (ARCHITECTURE.md, "The house").

Usage: house.py CRATE_SRC... ; exits 1 and prints each circle with the
names that tie it. No dependencies beyond Python 3.
"""
import os
import re
import sys


def load(root):
    files = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            if n.endswith(".rs"):
                path = os.path.relpath(os.path.join(dirpath, n), root)
                if os.path.basename(path) != "tests.rs":
                    with open(os.path.join(dirpath, n), encoding="utf-8") as f:
                        files[path] = f.read()
    return files


def module_path(p):
    parts = p[:-3].split("/")
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def without_tests(src):
    while True:
        m = re.search(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", src)
        if not m:
            return src
        i, depth = m.end(), 1
        while depth and i < len(src):
            depth += {"{": 1, "}": -1}.get(src[i], 0)
            i += 1
        src = src[: m.start()] + src[i:]


def strip(src):
    src = re.sub(r"//[^\n]*", "", src)
    src = re.sub(r"/\*.*?\*/", "", src, flags=re.S)
    src = re.sub(r'"(\\.|[^"\\])*"', '""', src)
    return without_tests(src)


def use_leaves(tree):
    """`a::{b, c::d}` -> [[a, b], [a, c, d]] (aliases dropped)."""
    out = []

    def rec(prefix, s):
        s = s.strip()
        m = re.match(r"^((?:\w+::)*)\{(.*)\}$", s, re.S)
        if not m:
            s = re.sub(r"\s+as\s+\w+$", "", s)
            out.append(prefix + [x for x in s.split("::") if x])
            return
        pre = [x for x in m.group(1).split("::") if x]
        depth, cur, parts = 0, "", []
        for ch in m.group(2):
            depth += {"{": 1, "}": -1}.get(ch, 0)
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        parts.append(cur)
        for part in parts:
            if part.strip():
                rec(prefix + pre, part)

    rec([], tree)
    return out


def graph(root):
    files = load(root)
    mods = {module_path(p): p for p in files}

    def absolute(path, here):
        if path[0] == "crate":
            return list(path[1:])
        if path[0] == "self":
            return list(here) + list(path[1:])
        cur, i = list(here), 0
        while i < len(path) and path[i] == "super":
            cur, i = cur[:-1], i + 1
        if i:
            return cur + list(path[i:])
        if tuple(here) + (path[0],) in mods:
            return list(here) + list(path)
        return None

    def target(a):
        for k in range(len(a), -1, -1):
            f = mods.get(tuple(a[:k]))
            if f:
                return f, (a[k] if k < len(a) else "")
        return None, None

    edges = {}
    for p, src in files.items():
        s, here = strip(src), module_path(p)
        paths = []
        for m in re.finditer(r"\buse\s+([^;]+);", s):
            paths += use_leaves(m.group(1))
        body = re.sub(r"\buse\s+[^;]+;", "", s)
        children = [k[-1] for k in mods if len(k) == len(here) + 1 and k[: len(here)] == here]
        for head in ["crate", "super", "self"] + children:
            for m in re.finditer(r"(?<![\w:])(" + head + r"(?:::\w+)+)", body):
                paths.append(m.group(1).split("::"))
        for path in paths:
            a = absolute(path, here)
            if a is None:
                continue
            f, name = target(a)
            if f and f != p:
                edges.setdefault(p, {}).setdefault(f, set()).add(name)
    return files, edges


def circles(nodes, edges):
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def room(p):
    return p.split("/")[0].removesuffix(".rs")


def check(root):
    files, edges = graph(root)
    rooms = {}
    for a, targets in edges.items():
        for b, names in targets.items():
            if room(a) != room(b):
                rooms.setdefault(room(a), {}).setdefault(room(b), set()).update(
                    f"{a} -> {b}: {n}" for n in names
                )
    failed = False
    for kind, nodes, g in [
        ("files", files, edges),
        ("rooms", {room(p) for p in files}, rooms),
    ]:
        for comp in circles(nodes, g):
            failed = True
            print(f"{root}: circle of {kind}: {', '.join(comp)}")
            members = set(comp)
            for a in comp:
                for b, names in sorted(g.get(a, {}).items()):
                    if b in members:
                        print(f"    {a} -> {b}: {', '.join(sorted(names))}")
    n_edges = sum(len(t) for t in edges.values())
    print(f"{root}: {len(files)} files, {n_edges} arrows, {'circles found' if failed else 'no circle'}")
    return not failed


if __name__ == "__main__":
    roots = sys.argv[1:] or ["crates/core/src"]
    ok = all([check(r) for r in roots])
    sys.exit(0 if ok else 1)
