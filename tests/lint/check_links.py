#!/usr/bin/env python3
"""ctest lint.links: every relative link of the Markdown files git tracks names a file or folder
that exists, and its #anchor a heading of the target, as GitHub makes them (lower case, punctuation
dropped, spaces to hyphens, -1, -2 ... for repeated headings). Fails listing each broken link with
its file and line."""
import os
import re
import subprocess
import sys

LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading):
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return s.replace(" ", "-")


def outside_code(text):
    """The lines of `text` with fenced blocks and inline code blanked (their links are examples)."""
    lines, fenced = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            lines.append("")
            continue
        lines.append("" if fenced else re.sub(r"`[^`]*`", "", line))
    return lines


_anchors = {}


def anchors(path):
    if path not in _anchors:
        seen, found = {}, set()
        with open(path, encoding="utf-8") as f:
            for line in outside_code(f.read()):
                m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
                if m:
                    s = slug(m.group(1))
                    n = seen.get(s, 0)
                    seen[s] = n + 1
                    found.add(s if n == 0 else f"{s}-{n}")
        _anchors[path] = found
    return _anchors[path]


def main(root):
    os.chdir(root)
    try:
        files = subprocess.check_output(["git", "ls-files", "*.md"], text=True,
                                        stderr=subprocess.DEVNULL).split()
    except (OSError, subprocess.CalledProcessError):  # a source tree without git
        files = []
        for d, subdirs, names in os.walk("."):
            subdirs[:] = [s for s in subdirs if not re.match(r"(\.|build|work$|Testing$)", s)]
            files += [os.path.relpath(os.path.join(d, n)) for n in names if n.endswith(".md")]
    broken, checked = [], 0
    for md in files:
        with open(md, encoding="utf-8") as f:
            lines = outside_code(f.read())
        for no, line in enumerate(lines, 1):
            for m in LINK.finditer(line):
                target = m.group(1)
                if re.match(r"^[a-zA-Z][a-zA-Z+.-]*:", target):  # http:, mailto: ...
                    continue
                checked += 1
                path, _, anchor = target.partition("#")
                full = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
                if not os.path.exists(full):
                    broken.append(f"{md}:{no}: {target}: no such file")
                elif anchor and full.endswith(".md") and anchor not in anchors(full):
                    broken.append(f"{md}:{no}: {target}: no heading '#{anchor}' in {full}")
    for b in broken:
        print(b)
    print(f"links: {checked} in {len(files)} Markdown files, {len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
