#!/usr/bin/env python3
"""Checks Kiln's include graph (docs/contributing.md, "Layers and headers"):

  include_graph.py SOURCE_DIR cycles    no two modules include each other, directly or through others
  include_graph.py SOURCE_DIR headers   no header under include/kiln has more than 12 #include lines

A module is one stem of one layer: include/kiln/L/x.h, src/L/x.h and src/L/x.cc (or .cu) are the module L/x;
apps/kiln/x.{h,cc} the module apps/kiln/x. Its edges are its files' includes of "kiln/L/..." (public),
"L/..." (a layer's private header) and, in apps/, of a header beside the file. A file including its own
module's header is no edge. Exit 0 when clean, 1 with each offence named (the modules of a cycle and the
file and line of each include that closes it), 2 on bad usage.
"""
import os
import re
import sys

MAX_HEADER_INCLUDES = 12

# Known cycles (every module of one listed lets it pass), never added to; an entry none needs fails. Empty.
ALLOWED_CYCLE_MODULES = set()

# Headers over the limit; the same rule: an entry no longer needed fails. Empty.
ALLOWED_LONG_HEADERS = set()

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
ANY_INCLUDE_RE = re.compile(r'^\s*#\s*include\b')
SOURCE_EXTS = (".h", ".cc", ".cu", ".cuh")


def layers(root):
    return sorted(d for d in os.listdir(os.path.join(root, "src")) if os.path.isdir(os.path.join(root, "src", d)))


def source_files(root):
    for top in ("include/kiln", "src", "apps"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if f.endswith(SOURCE_EXTS):
                    yield os.path.relpath(os.path.join(dirpath, f), root)


def module_of(rel):
    """include/kiln/L/x.h -> L/x; src/L/x.cc -> L/x; apps/kiln/x.cc -> apps/kiln/x."""
    stem = os.path.splitext(rel)[0]
    if stem.startswith("include/kiln/"):
        return stem[len("include/kiln/"):]
    if stem.startswith("src/"):
        return stem[len("src/"):]
    return stem


def include_target(root, rel, inc, layer_names):
    """The module an include names, or None when it is not one of Kiln's (third-party, generated, system)."""
    first = inc.split("/", 1)[0]
    if first == "kiln" and os.path.isfile(os.path.join(root, "include", inc)):
        return module_of(os.path.join("include", inc))
    if first in layer_names and os.path.isfile(os.path.join(root, "src", inc)):
        return module_of(os.path.join("src", inc))
    if rel.startswith("apps/"):
        beside = os.path.join(os.path.dirname(rel), inc)
        if os.path.isfile(os.path.join(root, beside)):
            return module_of(beside)
    return None


def read_lines(root, rel):
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        return f.read().split("\n")


def build_graph(root):
    layer_names = set(layers(root))
    edges = {}  # module -> {module: [(file, line), ...]}
    for rel in source_files(root):
        src = module_of(rel)
        edges.setdefault(src, {})
        for n, line in enumerate(read_lines(root, rel), 1):
            m = INCLUDE_RE.match(line)
            if not m:
                continue
            dst = include_target(root, rel, m.group(1), layer_names)
            if dst is None or dst == src:
                continue
            edges[src].setdefault(dst, []).append((rel, n))
            edges.setdefault(dst, {})
    return edges


def strongly_connected(edges):
    """Tarjan's algorithm, iterative (no recursion limit); components of more than one module."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = [0]
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return sorted(out)


def describe(comp, edges):
    members = set(comp)
    lines = []
    for a in comp:
        for b in sorted(edges[a]):
            if b in members:
                where = ", ".join("%s:%d" % fl for fl in edges[a][b])
                lines.append("    %s -> %s  (%s)" % (a, b, where))
    return "\n".join(lines)


def check_cycles(root):
    edges = build_graph(root)
    bad, needed = [], set()
    for comp in strongly_connected(edges):
        if set(comp) <= ALLOWED_CYCLE_MODULES:
            needed |= set(comp)
            print("known cycle (allow-listed in %s): %s" % (os.path.basename(__file__), " <-> ".join(comp)))
            continue
        bad.append(comp)
    for comp in bad:
        print("FAIL: include cycle between %d modules: %s" % (len(comp), " <-> ".join(comp)))
        print(describe(comp, edges))
    stale = sorted(ALLOWED_CYCLE_MODULES - needed)
    for m in stale:
        print("FAIL: %s is allow-listed as part of a known cycle but is in none: remove it from the list" % m)
    if bad or stale:
        return 1
    print("PASS: %d modules, no include cycle outside the allow-list (%d allow-listed)" %
          (len(edges), len(ALLOWED_CYCLE_MODULES)))
    return 0


def check_headers(root):
    bad, needed = [], set()
    count = 0
    for rel in source_files(root):
        if not rel.startswith("include/kiln/") or not rel.endswith((".h", ".cuh")):
            continue
        count += 1
        n = sum(1 for line in read_lines(root, rel) if ANY_INCLUDE_RE.match(line))
        if n <= MAX_HEADER_INCLUDES:
            continue
        if rel in ALLOWED_LONG_HEADERS:
            needed.add(rel)
            print("known (allow-listed): %s has %d #include lines" % (rel, n))
            continue
        bad.append((rel, n))
    for rel, n in bad:
        print("FAIL: %s has %d #include lines (at most %d: include only what its declarations need)" %
              (rel, n, MAX_HEADER_INCLUDES))
    stale = sorted(ALLOWED_LONG_HEADERS - needed)
    for rel in stale:
        print("FAIL: %s is allow-listed but within the limit now: remove it from the list" % rel)
    if bad or stale:
        return 1
    print("PASS: %d headers, none with more than %d #include lines (%d allow-listed)" %
          (count, MAX_HEADER_INCLUDES, len(ALLOWED_LONG_HEADERS)))
    return 0


def main(argv):
    if len(argv) != 3 or argv[2] not in ("cycles", "headers") or not os.path.isdir(os.path.join(argv[1], "src")):
        print("usage: include_graph.py SOURCE_DIR cycles|headers", file=sys.stderr)
        return 2
    return check_cycles(argv[1]) if argv[2] == "cycles" else check_headers(argv[1])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
