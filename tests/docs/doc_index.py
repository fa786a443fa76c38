#!/usr/bin/env python3
"""doc_index.py - the documentation's bookkeeping, checked (ctest docs.index).

  doc_index.py SOURCE_DIR BUILD_DIR CTEST

Fails (exit 1, one line per finding) when:
- a page docs/*.md is not linked from the index, docs/README.md;
- README.md's list of ctest labels (the paragraph that starts "ctest
  labels") leaves out a label that `ctest --print-labels` prints in
  BUILD_DIR, or names one that no test registration in the sources uses;
- docs or source comments carry a dated history line: an ISO date, an
  uptime line, "base = main at", or the name of the machine a measurement
  was taken on. History belongs to git log (design.md, "Docs"); a line
  whose date is data says so with the marker "date-is-data".
"""
import os
import re
import subprocess
import sys

TEXT_SUFFIXES = (".md", ".c", ".h", ".cu", ".cc", ".cpp", ".py", ".sh",
                 ".cmake", ".txt", ".in")
HISTORY = [
    (re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b"), "a date"),
    (re.compile(r"\bup\s+\d+(:\d+| min| days?),.*load average"), "an uptime line"),
    (re.compile(r"base = main at"), "a 'base = main at' line"),
    (re.compile(r"\bPVM\b"), "the test machine's hypervisor"),
    (re.compile(r"development VM|this project's [^.]*\bVMs?\b|\bthe [0-9]+-core VM\b"),
     "the test machine"),
]


def tracked_files(source):
    try:
        out = subprocess.run(["git", "-C", source, "ls-files"], check=True,
                             capture_output=True, text=True).stdout
        return [line for line in out.splitlines() if line]
    except (OSError, subprocess.CalledProcessError):
        found = []
        for root, dirs, files in os.walk(source):
            dirs[:] = [d for d in dirs
                       if not d.startswith((".", "build"))]
            for name in files:
                found.append(os.path.relpath(os.path.join(root, name), source))
        return found


def check_index(source, problems):
    docs = os.path.join(source, "docs")
    with open(os.path.join(docs, "README.md"), encoding="utf-8") as f:
        index = f.read()
    for name in sorted(os.listdir(docs)):
        if name.endswith(".md") and name != "README.md":
            if "(" + name + ")" not in index:
                problems.append("docs/README.md does not link docs/%s" % name)


def readme_labels(source):
    with open(os.path.join(source, "README.md"), encoding="utf-8") as f:
        text = f.read()
    match = re.search(r"^ctest labels \([^)]*\):\s*(.*?)\.\s*$", text,
                      re.M | re.S)
    if not match:
        return None
    return [w.strip() for w in re.split(r",\s*", match.group(1)) if w.strip()]


def registered_label_words(source, files):
    words = set()
    for path in files:
        if path.endswith(".cmake") or path.endswith("CMakeLists.txt"):
            try:
                with open(os.path.join(source, path), encoding="utf-8") as f:
                    words.update(re.findall(r"[A-Za-z_]+", f.read()))
            except OSError:
                pass
    return words


def check_labels(source, build, ctest, files, problems):
    listed = readme_labels(source)
    if listed is None:
        problems.append("README.md has no paragraph starting 'ctest labels (...):'")
        return
    out = subprocess.run([ctest, "--print-labels"], cwd=build, check=True,
                         capture_output=True, text=True).stdout
    printed = []
    seen = False
    for line in out.splitlines():
        if line.strip().startswith("All Labels"):
            seen = True
            continue
        if seen and line.strip():
            printed.append(line.strip())
    for label in printed:
        if label not in listed:
            problems.append("README.md's label list lacks '%s' (ctest "
                            "--print-labels has it)" % label)
    words = registered_label_words(source, files)
    for label in listed:
        if label not in printed and label not in words:
            problems.append("README.md lists label '%s', which no test "
                            "registration uses" % label)


def check_history(source, files, problems):
    for path in files:
        if not path.endswith(TEXT_SUFFIXES) and not path.endswith("CMakeLists.txt"):
            continue
        if path.startswith("tests/fuzz/") or path == "tests/docs/doc_index.py":
            continue
        full = os.path.join(source, path)
        try:
            with open(full, encoding="utf-8") as f:
                lines = f.readlines()
        except (OSError, UnicodeDecodeError):
            continue
        for number, line in enumerate(lines, 1):
            if "date-is-data" in line:
                continue
            for pattern, what in HISTORY:
                if pattern.search(line):
                    problems.append("%s:%d: %s (history belongs to git log): %s"
                                    % (path, number, what, line.strip()[:100]))
                    break


def main():
    if len(sys.argv) != 4:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    source, build, ctest = sys.argv[1:]
    files = tracked_files(source)
    problems = []
    check_index(source, problems)
    check_labels(source, build, ctest, files, problems)
    check_history(source, files, problems)
    for problem in problems:
        print(problem)
    if problems:
        print("docs.index: %d finding(s)" % len(problems))
        return 1
    print("docs.index: the index links every page, README's labels match "
          "ctest's, no dated history in %d files" % len(files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
