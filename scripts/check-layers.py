#!/usr/bin/env python3
"""`make lint`: the controller's layers only look down (issue 26), and the
API crate's modules import each other without a circle.

observe and facts import nothing of decide, act or report; decide nothing of
act or report; report nothing of act. A use of a higher layer, by path
(`crate::controller::decide::...`, `super::decide::...` from a top-level file,
`super::super::act::...` from a layer's folder), is reported with its line.
Comments are skipped; tests follow the same rule.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent / "crates/operator/src/controller"
FORBIDDEN = {
    "observe": {"decide", "act", "report"},
    "facts": {"decide", "act", "report"},
    "decide": {"act", "report"},
    "report": {"act"},
}
LAYERS = {"observe", "facts", "decide", "act", "report"}


def layer_of(path: pathlib.Path):
    rel = path.relative_to(ROOT)
    first = rel.parts[0]
    name = first[:-3] if first.endswith(".rs") else first
    return name if name in LAYERS else None


def targets(line: str, nested: bool):
    found = set(re.findall(r"crate::controller::(\w+)", line))
    if nested:
        found |= set(re.findall(r"super::super::(\w+)", line))
    else:
        found |= set(re.findall(r"(?<!super::)super::(\w+)", line))
    return found & LAYERS


API = ROOT.parent.parent.parent / "api/src/v1alpha1"


def api_cycles():
    """Circles among the modules of crates/api/src/v1alpha1 (by `super::x`
    outside comments and test modules)."""
    graph = {}
    for path in sorted(API.glob("*.rs")):
        name = path.stem
        text = path.read_text().split("#[cfg(test)]", 1)[0]
        code = "\n".join(l.split("//", 1)[0] for l in text.splitlines())
        graph[name] = {t for t in re.findall(r"super::(\w+)", code) if t != name}
    graph = {k: {t for t in v if t in graph} for k, v in graph.items()}
    cycles = []

    def visit(node, stack):
        for t in sorted(graph[node]):
            if t in stack:
                cycles.append(stack[stack.index(t):] + [t])
            elif len(stack) < len(graph):
                visit(t, stack + [t])

    for n in sorted(graph):
        visit(n, [n])
    seen, out = set(), []
    for c in cycles:
        key = frozenset(c)
        if key not in seen:
            seen.add(key)
            out.append(" -> ".join(c))
    return out


def main() -> int:
    bad = [f"crates/api: modules import each other in a circle: {c}" for c in api_cycles()]
    for path in sorted(ROOT.rglob("*.rs")):
        layer = layer_of(path)
        if layer not in FORBIDDEN:
            continue
        # In a layer's mod.rs `super::` is the controller itself.
        nested = len(path.relative_to(ROOT).parts) > 1 and path.name != "mod.rs"
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("//", 1)[0]
            for t in targets(code, nested) & FORBIDDEN[layer]:
                bad.append(f"{path.relative_to(ROOT.parent.parent.parent.parent)}:{n}: {layer} imports {t}: {line.strip()}")
    for b in bad:
        print(b)
    if bad:
        print(f"check-layers: {len(bad)} import(s) look up a layer", file=sys.stderr)
        return 1
    print("check-layers: observe, facts, decide and report only look down; no circle in crates/api")
    return 0


if __name__ == "__main__":
    sys.exit(main())
