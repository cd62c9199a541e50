#!/usr/bin/env python3
"""`make lint`: the crate borders that are the layers hold (the pure crates
have no client, runtime or object store in their normal dependency tree), and
the API crate's modules import each other without a circle. The rules between
the steps inside the operator crate are checked by `check-layers` (crates/layers,
a Rust parser), which `make lint` runs after this.
"""
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent / "crates/operator/src/controller"


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


# The pure crates: nothing of a client, a runtime or an object store may be
# under them (`cargo tree -p <crate> -e normal`).
PURE = ["api", "placement", "valkey", "resources", "decide"]
IO = ["kube", "kube-client", "kube-runtime", "tokio", "hyper", "reqwest", "object_store", "redis", "rustls"]


def io_under(crate):
    out = subprocess.run(
        ["cargo", "tree", "-p", crate, "-e", "normal", "--prefix", "none", "--offline"],
        capture_output=True, text=True, check=True).stdout
    names = {line.split(" ")[0] for line in out.splitlines() if line.strip()}
    return sorted(names & set(IO))


def main() -> int:
    bad = [f"crates/api: modules import each other in a circle: {c}" for c in api_cycles()]
    for crate in PURE:
        for dep in io_under(crate):
            bad.append(f"crate {crate} has {dep} in its normal dependency tree")
    for b in bad:
        print(b)
    if bad:
        print(f"check-layers: {len(bad)} problem(s)", file=sys.stderr)
        return 1
    print("check-layers: " + ", ".join(PURE) + " hold no client, runtime or object store; no circle in crates/api")
    return 0


if __name__ == "__main__":
    sys.exit(main())
