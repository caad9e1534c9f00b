#!/usr/bin/python3
"""The arrows of lib/ point one way: no two of its files call each other's functions, directly or
round a circle (a newcomer's review found seven files of the repository wing calling in a circle).
Each kestrel__ function defined at the start of a line of a .c file is that file's; a call of it
from another file is an arrow. Prints every circle found and exits 1; 0 when there is none.
Usage: call_cycles.py DIR..."""
import os
import re
import sys

DEF = re.compile(r'^(?:static )?[A-Za-z_][^\n;(]*\b(kestrel__\w+)\(', re.M)
CALL = re.compile(r'\b(kestrel__\w+)\(')


def arrows(dirs):
    src = {}
    for d in dirs:
        for root, _, names in os.walk(d):
            for n in names:
                if n.endswith(".c"):
                    path = os.path.join(root, n)
                    with open(path, encoding="utf-8") as f:
                        src[path] = f.read()
    owner = {}
    for path, s in src.items():
        for m in DEF.finditer(s):
            brace, semi = s.find("\n{", m.end()), s.find(";", m.end())
            if brace >= 0 and (semi < 0 or brace < semi):   # a definition, not a declaration
                owner[m.group(1)] = path
    out = {p: {} for p in src}
    for path, s in src.items():
        for name in set(CALL.findall(s)):
            if owner.get(name, path) != path:
                out[path].setdefault(owner[name], []).append(name)
    return out


def circles(out):
    """Tarjan's strongly connected components of more than one file."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in out[v]:
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
                found.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(out):
        if v not in index:
            visit(v)
    return found


def main():
    out = arrows(sys.argv[1:])
    found = circles(out)
    for comp in found:
        print("files calling each other in a circle:")
        for a in comp:
            for b, names in sorted(out[a].items()):
                if b in comp:
                    print(f"  {a} -> {b}: {', '.join(sorted(set(names)))}")
    if not found:
        print(f"no circles among the {len(out)} files' calls")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
