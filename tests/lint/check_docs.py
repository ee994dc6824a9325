#!/usr/bin/env python3
"""ctest lint.docs: what the root documents name exists. Reads the code spans of the Markdown files
at the repository's root (inline `...` and the words of fenced blocks) and fails, naming the
document and line, when
  - a repository path (src/..., tests/..., or a path under src/fnvlp/ such as train/step.cpp) names
    no tracked file or folder;
  - an executable fnvlp-NAME is not one CMake builds;
  - a config key (section.key, section.key=value, section.key: value) of fnvlp-pretrain's config
    is not a key or section of its resolved config (`fnvlp-pretrain --print-config`);
  - a C++ name (ns::Name, Class::member, name(), a CamelCase type) or a gtest case (Suite.Case)
    appears nowhere in the project's code.
Names from other projects (PyTorch, Kokkos, ALBEF, ...) are listed with the reason in
docs_external.txt beside this script.
Usage: check_docs.py SRC_DIR FNVLP_PRETRAIN"""
import os
import re
import subprocess
import sys

src, pretrain = sys.argv[1], sys.argv[2]
os.chdir(src)
tracked = subprocess.run(["git", "ls-files"], capture_output=True, text=True,
                         check=True).stdout.split("\n")
files = set(f for f in tracked if f)
dirs = set()
for f in files:
    parts = f.split("/")
    for i in range(1, len(parts)):
        dirs.add("/".join(parts[:i]))
code_ext = (".cpp", ".hpp", ".h", ".cu", ".cuh", ".c", ".py")
code = "\n".join(open(f, errors="replace").read() for f in sorted(files)
                 if f.endswith(code_ext) and not f.startswith("analysis/results/"))
cmake = "\n".join(open(f).read() for f in files if f.endswith("CMakeLists.txt"))
executables = set(re.findall(r"(?:add_executable|fnvlp_executable)\((fnvlp-[\w-]+)", cmake))
top_dirs = {d for d in dirs if "/" not in d} | {d[len("src/fnvlp/"):] for d in dirs
                                                 if d.startswith("src/fnvlp/") and d.count("/") == 2}
external = set()
for line in open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "docs_external.txt")):
    line = line.split("#", 1)[0].strip()
    if line:
        external.add(line)

# The resolved config: flattened keys and their sections.
yaml_text = subprocess.run([pretrain, "--print-config"],
                           capture_output=True, text=True, check=True).stdout
keys, stack = set(), []
for line in yaml_text.split("\n"):
    m = re.match(r"^( *)([A-Za-z_][\w]*):", line)
    if not m:
        continue
    depth = len(m.group(1)) // 2
    stack = stack[:depth] + [m.group(2)]
    keys.add(".".join(stack))
sections = {k for k in keys if "." not in k}
if len(keys) < 50 or "train" not in sections:
    sys.exit(f"check_docs: fnvlp-pretrain --print-config gave {len(keys)} keys: {yaml_text[:300]}")

FILE_EXT = r"\.(yaml|yml|json|jsonl|pt|h5|csv|tsv|md|txt|html|png|log|lock)"
PLACEHOLDER = re.compile(r"[A-Z]{2,}|\.\.\.|[*<>{}|$~]")
word_cache = {}


def in_code(name):
    if name not in word_cache:
        word_cache[name] = re.search(r"(?<![\w])" + re.escape(name) + r"(?![\w])", code) is not None
    return word_cache[name]


def path_exists(p):
    p = p.rstrip("/").split("#", 1)[0]
    for base in ("", "src/fnvlp/", "tests/"):
        if base + p in files or base + p in dirs:
            return True
    return False


def check(token):
    """The reason `token` is wrong, or None."""
    t = token.strip().rstrip(".,;:")
    if not t or t in external:
        return None
    first = t.split()[0].rstrip(".,;:")
    if first in external:
        return None
    if re.fullmatch(r"fnvlp-[a-z][\w-]*", first):
        return None if first in executables else f"no executable {first} in any CMakeLists.txt"
    m = re.fullmatch(r"([a-z_]+)((?:\.[a-z0-9_]+)+)(?:[=:].*)?", t if " " not in t else first)
    if m and m.group(1) in sections and not re.search(FILE_EXT + "$", m.group(2)):
        key = m.group(1) + m.group(2)
        # A key of earlier releases (still loaded) or a fault site is a string in the code.
        ok = key in keys or ('"' + key + '"') in code
        return None if ok else f"no config key {key} (fnvlp-pretrain --print-config)"
    if "/" in first and first.split("/")[0] in top_dirs:
        if PLACEHOLDER.search(first) or not re.fullmatch(r"[\w./+#-]+", first):
            return None
        if not re.search(r"(\.(cpp|hpp|h|cu|sh|py|yaml|md|txt|cmake|patch|in)|/)$", first.split("#")[0]):
            return None  # outputs and build products (data/flickr8k-train, tests/fnvlp_unit_tests)
        return None if path_exists(first) else f"no file or folder {first} in the repository"
    m = re.fullmatch(r"(?:[A-Za-z_]\w*::)*([A-Za-z_]\w*)(?:\(\))?", t)
    if m and ("::" in t or t.endswith("()")):
        quals = t.rstrip("()").split("::")
        if quals[0] in external:
            return None
        missing = [q for q in quals if not in_code(q)]
        return f"no C++ name {'::'.join(missing)} in the code" if missing else None
    if re.fullmatch(r"[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+", t):
        return None if in_code(t) else f"no type {t} in the code"
    m = re.fullmatch(r"([A-Z][A-Za-z0-9]+)\.([A-Z][A-Za-z0-9_]+)", t)
    if m:  # a gtest case
        ok = re.search(r"TEST(?:_F|_P)?\(\s*" + m.group(1) + r",\s*" + m.group(2) + r"\b", code)
        return None if ok else f"no gtest case {t} in tests/"
    return None


problems = []
docs = sorted(f for f in files if "/" not in f and f.endswith(".md"))
for doc in docs:
    fenced = False
    for n, line in enumerate(open(doc), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        tokens = line.split() if fenced else re.findall(r"`([^`]+)`", line)
        for tok in tokens:
            why = check(tok)
            if why:
                problems.append(f"{doc}:{n}: `{tok}`: {why}")
for p in problems:
    print(p)
if problems:
    sys.exit(f"check_docs: {len(problems)} names in the root documents do not exist")
print(f"docs: {len(docs)} root documents, every path, executable, config key and C++ name they "
      f"name exists ({len(keys)} config keys, {len(executables)} executables)")
