#!/usr/bin/env python3
"""doc_blocks.py - runs the documentation's runnable command blocks.

    doc_blocks.py SOURCE_DIR BUILD_DIR

A block is runnable when the line before its opening ```sh fence is
"<!-- runnable -->". Every such block in SOURCE_DIR/README.md and
SOURCE_DIR/docs/*.md runs with bash -euo pipefail, in the order of the page,
from a scratch directory that looks like the repository root: include/,
docs/, tools/, tests/ and scripts/ link to the source, build/ to BUILD_DIR
(the tree ctest tests), so blocks must not configure or rebuild build/.
Blocks of one page share the scratch directory (a later block may use an
earlier one's output). Also checked: every program in docs/examples/ is
compiled by some runnable block, and the C listing under "A complete
example" in docs/api.md is docs/examples/allreduce_example.c as it is.
Exit 1 naming the first page and block that failed.
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

BLOCK_TIMEOUT_S = 150
MARK = "<!-- runnable -->"


def fail(message):
    print("doc_blocks: " + message)
    sys.exit(1)


def runnable_blocks(text):
    """(line number, code) of each runnable ```sh block."""
    lines = text.split("\n")
    blocks = []
    for i, line in enumerate(lines):
        if line.strip() != MARK:
            continue
        if i + 1 >= len(lines) or lines[i + 1].strip() not in ("```sh", "```bash"):
            fail(f"line {i + 1}: {MARK} is not followed by a ```sh fence")
        end = i + 2
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if end == len(lines):
            fail(f"line {i + 2}: the block never closes")
        blocks.append((i + 2, "\n".join(lines[i + 2:end])))
    return blocks


def check_api_listing(source):
    text = open(os.path.join(source, "docs/api.md"), encoding="utf-8").read()
    match = re.search(r"## A complete example.*?```c\n(.*?)```", text, re.S)
    if not match:
        fail("docs/api.md: no C listing under 'A complete example'")
    example = open(os.path.join(source, "docs/examples/allreduce_example.c"),
                   encoding="utf-8").read()
    if match.group(1) != example:
        fail("docs/api.md's listing differs from docs/examples/allreduce_example.c")


def main():
    source, build = (os.path.abspath(p) for p in sys.argv[1:3])
    sanitize = sys.argv[3] if len(sys.argv) > 3 else ""
    check_api_listing(source)
    if sanitize:
        print(f"SKIP: this build's libxcoll is built with -fsanitize={sanitize}, "
              "and the runnable blocks link programs with plain cc, without "
              "that runtime; they run in a build without XCOLL_SANITIZE")
        sys.exit(77)
    pages = [os.path.join(source, "README.md")] + sorted(
        glob.glob(os.path.join(source, "docs", "*.md")))
    all_code, ran = "", 0
    for page in pages:
        blocks = runnable_blocks(open(page, encoding="utf-8").read())
        if not blocks:
            continue
        name = os.path.relpath(page, source)
        scratch = tempfile.mkdtemp(prefix="xcoll-doc-")
        try:
            for sub in ("include", "docs", "tools", "tests", "scripts"):
                os.symlink(os.path.join(source, sub), os.path.join(scratch, sub))
            os.symlink(build, os.path.join(scratch, "build"))
            for line, code in blocks:
                all_code += code + "\n"
                try:
                    result = subprocess.run(
                        ["bash", "-euo", "pipefail", "-c", code], cwd=scratch,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                        timeout=BLOCK_TIMEOUT_S, check=False)
                except subprocess.TimeoutExpired:
                    fail(f"{name}:{line}: still running after {BLOCK_TIMEOUT_S} s")
                output = result.stdout.decode(errors="replace")
                if result.returncode != 0:
                    print(output[-4000:])
                    fail(f"{name}:{line}: exit status {result.returncode}")
                print(f"doc_blocks: {name}:{line}: ok")
                ran += 1
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    for example in sorted(glob.glob(os.path.join(source, "docs/examples/*.c"))):
        rel = os.path.relpath(example, source)
        if rel not in all_code:
            fail(f"{rel} is compiled by no runnable block")
    if ran == 0:
        fail("no runnable block found")
    print(f"doc_blocks: {ran} blocks ran")


if __name__ == "__main__":
    main()
