#!/usr/bin/env python3
"""ctest lint.bench_docs: the benchmark documents stay true to the benchmarks. Fails, naming the
file and line, when
  - a section of tests/bench/README.md (a ## or ### heading) holds more than one **Current**
    paragraph: each benchmark has one current table, older ones are history or results files;
  - a figure of README.md's "Headline figures" table (every decimal number of its second column,
    2.03x, 21.5%, 2.807 s; a longer decimal there may round to it) appears nowhere in the tests/bench/README.md sections its row links to,
    or a figure of the index atop tests/bench/README.md (its last column) nowhere in its section;
  - a documented benchmark command (in tests/bench/README.md's code blocks and code spans:
    [VAR=value ...] bash tests/bench/NAME.sh | tests/gpu/device_run.sh ...) names a script that
    does not exist, does not answer its --help form (exit 0, its usage header), or sets a
    variable that neither the script nor a script it runs reads.
Usage: check_bench_docs.py SRC_DIR"""
import os
import re
import subprocess
import sys
from decimal import ROUND_HALF_UP, Decimal

src = sys.argv[1]
os.chdir(src)
errors = []


def slug(heading):
    """GitHub's anchor of a heading."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


bench = open("tests/bench/README.md").read().split("\n")

# Sections: heading line index, level, anchor.
heads = [(i, len(m.group(1)), slug(m.group(2)))
         for i, line in enumerate(bench) for m in [re.match(r"^(#{2,3}) (.*)", line)] if m]
in_fence = False
fence_lines = set()
for i, line in enumerate(bench):
    if line.startswith("```"):
        in_fence = not in_fence
        fence_lines.add(i)
    elif in_fence:
        fence_lines.add(i)

# 1. One **Current** per section.
for k, (start, level, anchor) in enumerate(heads):
    end = heads[k + 1][0] if k + 1 < len(heads) else len(bench)
    current = [i for i in range(start, end)
               if i not in fence_lines and bench[i].startswith("**Current")]
    if len(current) > 1:
        errors.append(f"tests/bench/README.md:{current[1] + 1}: a second **Current** paragraph in "
                      f"section '{bench[start]}' (line {current[0] + 1} is the first)")


NUM = r"(?<![\w.])\d+\.\d+(?![\w.]*\d)"


def found(num, text):
    """num (as written, d decimals) is in text, or a longer decimal there rounds to it."""
    d = len(num.split(".")[1])
    want = Decimal(num)
    for x in re.findall(r"(?<![\d.])\d+\.\d+", text):
        if len(x.split(".")[1]) >= d and Decimal(x).quantize(
                Decimal(1).scaleb(-d), rounding=ROUND_HALF_UP) == want:
            return True
    return False


def section_text(anchor):
    """The text of the section with this anchor and its subsections; None if there is none."""
    for k, (start, level, a) in enumerate(heads):
        if a != anchor:
            continue
        end = len(bench)
        for start2, level2, _ in heads[k + 1:]:
            if level2 <= level:
                end = start2
                break
        return "\n".join(bench[start:end])
    return None


# 2. The headline figures.
readme = open("README.md").read().split("\n")
try:
    first = next(i for i, l in enumerate(readme) if l.startswith("## Headline figures"))
except StopIteration:
    errors.append("README.md: no '## Headline figures' section")
    first = len(readme)
rows = 0
for i in range(first + 1, len(readme)):
    line = readme[i]
    if line.startswith("## "):
        break
    if not line.startswith("| ") or line.startswith("|---") or line.startswith("| fnvlp against"):
        continue
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    anchors = re.findall(r"tests/bench/README\.md#([\w\-]+)", line)
    if not anchors:
        errors.append(f"README.md:{i + 1}: a headline row without a link to its table")
        continue
    texts = []
    for a in anchors:
        t = section_text(a)
        if t is None:
            errors.append(f"README.md:{i + 1}: #{a} is no section of tests/bench/README.md")
        else:
            texts.append(t)
    text = "\n".join(texts)
    rows += 1
    for num in re.findall(NUM, cells[1]):
        if not found(num, text):
            errors.append(f"README.md:{i + 1}: headline figure {num} is not in its table "
                          f"({', '.join('#' + a for a in anchors)})")
if rows == 0:
    errors.append("README.md: the headline table has no rows")

# The index at the top of tests/bench/README.md: its "current result" column likewise.
index_rows = 0
for i, line in enumerate(bench):
    if heads and i >= heads[0][0]:
        break
    m = re.match(r"^\| \[[^\]]*\]\(#([\w\-]+)\)", line)
    if not m:
        continue
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    text = section_text(m.group(1))
    if text is None:
        errors.append(f"tests/bench/README.md:{i + 1}: #{m.group(1)} is no section")
        continue
    index_rows += 1
    for num in re.findall(NUM, cells[-1]):
        if not found(num, text):
            errors.append(f"tests/bench/README.md:{i + 1}: index figure {num} is not in "
                          f"section #{m.group(1)}")

# 3. Documented commands.
CMD = re.compile(r"((?:[A-Z][A-Z0-9_]*=(?:\"[^\"]*\"|'[^']*'|\S*)\s+)*)"
                 r"(?:bash\s+)?(tests/(?:bench|gpu)/[\w.]+\.sh)\b")
ASSIGN = re.compile(r"([A-Z][A-Z0-9_]*)=(?:\"[^\"]*\"|'[^']*'|\S*)")
commands = []
for i, line in enumerate(bench):
    spans = [line] if i in fence_lines else re.findall(r"`([^`]*)`", line)
    for span in spans:
        for m in CMD.finditer(span.split("#", 1)[0] if i in fence_lines else span):
            commands.append((i + 1, [a.group(1) for a in ASSIGN.finditer(m.group(1))],
                             m.group(2)))
if len(commands) < 10:
    errors.append(f"tests/bench/README.md: only {len(commands)} documented commands found")


def script_closure(path, seen=None):
    """The script's text and the text of every tests/ script or Python file it names."""
    seen = seen if seen is not None else set()
    if path in seen or not os.path.isfile(path):
        return ""
    seen.add(path)
    text = open(path, errors="replace").read()
    out = text
    for name in set(re.findall(r"([\w\-]+\.(?:sh|py))\b", text)):
        for d in ("tests/bench", "tests/gpu", "tests/integration", "env"):
            out += script_closure(os.path.join(d, name), seen)
    return out


helped = {}
for line_no, variables, script in commands:
    if not os.path.isfile(script):
        errors.append(f"tests/bench/README.md:{line_no}: {script} does not exist")
        continue
    if script not in helped:
        r = subprocess.run(["bash", script, "--help"], capture_output=True, text=True, timeout=30)
        helped[script] = r.returncode == 0 and len(r.stdout.strip()) > 40
        if not helped[script]:
            errors.append(f"tests/bench/README.md:{line_no}: `bash {script} --help` exits "
                          f"{r.returncode} without its usage: {(r.stdout + r.stderr)[-200:]}")
    text = script_closure(script)
    for v in variables:
        if not re.search(r"\b" + v + r"\b", text):
            errors.append(f"tests/bench/README.md:{line_no}: {v}= is read neither by {script} "
                          "nor by a script it runs")

for e in errors:
    print(e)
print(f"check_bench_docs: {len(heads)} sections, {rows} headline rows, {index_rows} index rows, "
      f"{len(commands)} commands "
      f"({len(helped)} scripts' --help): {len(errors)} problem(s)")
sys.exit(1 if errors else 0)
