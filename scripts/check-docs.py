#!/usr/bin/env python3
"""`make docs-check`: every relative link in README.md, CHANGELOG.md, docs/ and
the Helm chart's README names a file that exists and, with `#anchor` into a
Markdown file, a heading that makes that anchor (GitHub's rule). Links inside
code (fenced blocks, indented blocks, inline code) are not links."""
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = re.compile(r'\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+"[^"]*")?\)')


def prose(path):
    """(line number, text) of the lines outside code, inline code removed."""
    fence = None
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        m = re.match(r"^\s*(```+|~~~+)", line)
        if m:
            if fence is None:
                fence = m.group(1)
            elif m.group(1).startswith(fence):
                fence = None
            continue
        if fence is not None or line.startswith("    ") or line.startswith("\t"):
            continue
        yield n, re.sub(r"(`+)(?:(?!\1).)*?\1", "", line)


def slug(heading):
    text = re.sub(r"<[^>]+>", "", heading.strip()).lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return "".join(c for c in text if c.isalnum() or c in "-_ ").replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen, found, fence = {}, set(), None
        for line in open(path, encoding="utf-8"):
            m = re.match(r"^\s*(```+|~~~+)", line)
            if m:
                fence = None if fence and m.group(1).startswith(fence) else (fence or m.group(1))
                continue
            h = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if fence is None and h:
                s = slug(h.group(1))
                k = seen.get(s, 0)
                seen[s] = k + 1
                found.add(s if k == 0 else f"{s}-{k}")
        found |= set(re.findall(r'<a (?:id|name)="([^"]+)"', open(path, encoding="utf-8").read()))
        cache[path] = found
    return cache[path]


def main():
    files = ["README.md", "CHANGELOG.md", "deploy/helm/valkey-operator/README.md"]
    files += sorted(glob.glob("docs/**/*.md", recursive=True))
    bad = checked = 0
    for rel in files:
        path = os.path.join(ROOT, rel)
        if not os.path.exists(path):
            continue
        for n, text in prose(path):
            for target in LINK.findall(text):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, mailto:...
                    continue
                checked += 1
                file_part, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
                if not os.path.exists(dest):
                    print(f"{rel}:{n}: {target}: no such file")
                    bad += 1
                elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                    print(f"{rel}:{n}: {target}: no heading makes #{anchor}")
                    bad += 1
    if bad:
        print(f"docs-check: {bad} broken link(s) of {checked}")
        return 1
    print(f"docs-check: {checked} relative links in {len(files)} files are fine")
    return 0


if __name__ == "__main__":
    sys.exit(main())
