#!/usr/bin/env python3
"""Doc-tests: turns the code blocks of one Markdown file into one C++ translation unit
(and, for README-style shell blocks, one bash script), so that the build compiles every
C++ example of the docs and CTest runs it.

    extract_doctests.py --root <repo> --md <file.md> --cpp <out.cpp> [--sh <out.sh>]

A ```cpp / ```c++ block is
  - a complete program when it contains `int main`: compiled, its main renamed and called
    from the generated driver (must return 0);
  - `<!-- doctest: fragment -->` on the line before (blank lines allowed): the body of a
    function, compiled and run;
  - `<!-- doctest: compile -->`: like a fragment, compiled but not run (it needs a file or a
    device that the test does not have);
  - `<!-- doctest: toplevel -->`: namespace-scope declarations (a user policy class), seen
    by the blocks after it in the same file;
  - `<!-- doctest: skip: <reason> -->`: not compiled (CUDA device code, pseudo-code);
  - anything else is an error of the doc-test, so no untested C++ enters the docs.
`#include` lines of any block go to the top of the translation unit. `#line` directives make
compiler errors point into the .md; the driver names the .md line of a block that throws
or returns non-zero.

A ```sh / ```bash block after `<!-- doctest: sh -->` is written to the --sh script (run by
bash in an empty temporary directory, the CLI's folder first on PATH); other shell blocks
are left alone. Errors name the .md file and line, as `file:line: error: ...`.
"""

import argparse
import os
import re
import sys

CPP_LANGS = {"cpp", "c++"}
SH_LANGS = {"sh", "bash", "shell"}
MARKER = re.compile(r"^\s*<!--\s*doctest:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([^\s`]*)")
MAIN = re.compile(r"\bint\s+main\s*\(")
INCLUDE = re.compile(r"^\s*#\s*include\b")


class DocError(Exception):
    pass


class Block:
    def __init__(self, lang, line, lines, marker, marker_line):
        self.lang = lang  # fence language, lower case
        self.line = line  # .md line (1-based) of the first code line
        self.lines = lines  # code lines, fence indentation removed
        self.marker = marker  # text after "doctest:", or None
        self.marker_line = marker_line


def parse_blocks(text):
    """Every fenced block with the doctest marker that precedes it (if any)."""
    lines = text.split("\n")
    blocks = []
    last_marker = None  # (text, line) of the last marker, until a non-blank line
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            mk = MARKER.match(lines[i])
            if mk:
                last_marker = (mk.group(1), i + 1)
            elif lines[i].strip():
                last_marker = None
            i += 1
            continue
        indent, fence, lang = len(m.group(1)), m.group(2), m.group(3).lower()
        start = i + 1
        j = start
        while j < len(lines):
            c = re.match(r"^\s*(`{3,}|~{3,})\s*$", lines[j])
            if c and c.group(1)[0] == fence[0] and len(c.group(1)) >= len(fence):
                break
            j += 1
        body = [ln[indent:] if ln[:indent].strip() == "" else ln.lstrip() for ln in lines[start:j]]
        marker, marker_line = last_marker if last_marker else (None, None)
        blocks.append(Block(lang, start + 1, body, marker, marker_line))
        last_marker = None
        i = j + 1
    return blocks


def classify(block, md):
    """The block's mode: program, fragment, compile, toplevel, skip, sh or ignore."""
    where = f"{md}:{block.marker_line or block.line - 1}"
    mode = None
    if block.marker is not None:
        mode = block.marker.split(":", 1)[0].strip()
        if mode == "skip":
            reason = block.marker.split(":", 1)[1].strip() if ":" in block.marker else ""
            if not reason:
                raise DocError(f"{where}: error: `doctest: skip` needs a reason "
                               "(`<!-- doctest: skip: why -->`)")
            return "skip"
        if mode not in ("fragment", "compile", "toplevel", "sh"):
            raise DocError(f"{where}: error: unknown doctest marker `{block.marker}` "
                           "(fragment, compile, toplevel, skip: <reason>, sh)")
    if block.lang in SH_LANGS:
        return "sh" if mode == "sh" else "ignore"
    if block.lang not in CPP_LANGS:
        if mode is not None:
            raise DocError(f"{where}: error: `doctest: {mode}` before a ```{block.lang} block")
        return "ignore"
    if mode == "sh":
        raise DocError(f"{where}: error: `doctest: sh` before a C++ block")
    has_main = any(MAIN.search(ln) for ln in block.lines)
    if has_main and mode is not None:
        raise DocError(f"{where}: error: a block with `int main` is a complete program: "
                       f"drop its `doctest: {mode}` marker")
    if has_main:
        return "program"
    if mode is None:
        raise DocError(f"{md}:{block.line - 1}: error: C++ block without `int main` and "
                       "without a marker: add `<!-- doctest: fragment -->` (or toplevel, "
                       "compile, skip: <reason>) on the line before it")
    return mode


def strip_code(s):
    """s with comments, string and character literals blanked (same length), to match braces."""
    out = list(s)
    i, n = 0, len(s)
    while i < n:
        if s.startswith("//", i):
            j = s.find("\n", i)
            j = n if j < 0 else j
        elif s.startswith("/*", i):
            j = s.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif s[i] in "\"'":
            q, j = s[i], i + 1
            while j < n and s[j] != q:
                j += 2 if s[j] == "\\" else 1
            j = min(j + 1, n)
        else:
            i += 1
            continue
        for k in range(i, j):
            if out[k] != "\n":
                out[k] = " "
        i = j
    return "".join(out)


def rename_main(lines, md, line0):
    """The program with main renamed doc_main and `return 0;` before its closing brace
    (falling off the end of main returns 0; of doc_main it would not)."""
    text = "\n".join(lines)
    m = MAIN.search(strip_code(text))
    clean = strip_code(text)
    open_brace = clean.find("{", m.end())
    depth, k = 0, open_brace
    while k < len(clean):
        if clean[k] == "{":
            depth += 1
        elif clean[k] == "}":
            depth -= 1
            if depth == 0:
                break
        k += 1
    if open_brace < 0 or k >= len(clean):
        raise DocError(f"{md}:{line0}: error: cannot find the body of main")
    text = text[:k] + "return 0; " + text[k:]
    text = text[:m.start()] + "int doc_main(" + text[m.end():]
    return text.split("\n")


class Writer:
    """Builds the translation unit and keeps #line directives right."""

    def __init__(self, out_path):
        self.lines = []
        self.out_path = out_path

    def add(self, *lines):
        self.lines.extend(lines)

    def code(self, md, md_line, code):
        self.lines.append(f'#line {md_line} "{md}"')
        self.lines.extend(code)
        # back to the generated file: the line after this directive is its own number
        self.lines.append(f'#line {len(self.lines) + 2} "{self.out_path}"')


def nothing_to_run(md, compiled):
    """A driver for a page with no block to run: CTest reports it skipped (exit 77), not a
    pass that checked nothing (its blocks, if any, were checked by compiling them)."""
    return ["int main() {",
            f'  std::puts("{md}: no C++ block to run ({compiled} compiled)");',
            "  return 77;", "}", ""]


def generate_cpp(blocks, md, out_path):
    w = Writer(out_path)
    w.add(f"// Generated by tests/docs/extract_doctests.py from {md}: do not edit.")
    runnable = [b for b in blocks if b.mode in ("program", "fragment", "compile", "toplevel")]
    if not runnable:
        w.add("#include <cstdio>", "")
        w.add(*nothing_to_run(md, 0))
        return w.lines
    w.add("#include <posenc/posenc.hpp>", "", "#include <Eigen/Core>", "#include <cmath>",
          "#include <cstdio>", "#include <exception>", "#include <iostream>", "#include <string>",
          "#include <type_traits>", "#include <vector>", "")
    for b in runnable:  # every block's includes, once, at file scope
        for k, ln in enumerate(b.lines):
            if INCLUDE.match(ln):
                w.code(md, b.line + k, [ln])
                b.lines[k] = ""  # keeps the line numbers of the rest
    toplevel = []
    calls = []  # (kind, namespace, md line)
    for n, b in enumerate(runnable):
        ns = f"doc_block_{n}_line_{b.line}"
        w.add(f"namespace {ns} {{")
        for t in toplevel:  # earlier toplevel blocks' declarations
            w.add(f"using namespace {t};")
        if b.mode == "toplevel":
            w.code(md, b.line, b.lines)
            toplevel.append(ns)
        elif b.mode == "program":
            w.code(md, b.line, rename_main(b.lines, md, b.line))
            calls.append(("program", ns, b.line))
        else:
            w.add("[[maybe_unused]] static void doc_run() {")
            w.code(md, b.line, b.lines)
            w.add("}")
            if b.mode == "fragment":
                calls.append(("fragment", ns, b.line))
        w.add(f"}}  // namespace {ns}", "")
    if not calls:
        w.add(*nothing_to_run(md, len(runnable)))
        return w.lines
    w.add(
        "namespace {",
        "template <class F>",
        "int doc_call_main(F f) {",
        "  if constexpr (std::is_invocable_v<F>) {",
        "    return f();",
        "  } else {",
        '    static char name[] = "doc";',
        "    static char* argv[] = {name, nullptr};",
        "    return f(1, argv);",
        "  }",
        "}",
        "",
        "// Runs one block; false (with the .md line) when it throws or returns non-zero.",
        "template <class F>",
        "bool doc_check(const char* where, F f) {",
        "  try {",
        "    const int rc = f();",
        "    if (rc == 0) return true;",
        '    std::cerr << where << ": error: the program returned " << rc << "\\n";',
        "  } catch (const std::exception& e) {",
        '    std::cerr << where << ": error: the block threw: " << e.what() << "\\n";',
        "  }",
        "  return false;",
        "}",
        "}  // namespace",
        "",
        "int main() {",
        "  int failed = 0;",
    )
    for kind, ns, line in calls:
        where = f"{md}:{line}"
        if kind == "program":
            f = f"[] {{ return doc_call_main({ns}::doc_main); }}"
        else:
            f = f"[] {{ {ns}::doc_run(); return 0; }}"
        w.add(f'  if (!doc_check("{where}", {f})) ++failed;')
    w.add(f'  std::cout << "{md}: " << {len(calls)} - failed << " of {len(calls)} blocks ran, "',
          f'            << {sum(1 for b in runnable)} << " compiled\\n";',
          "  return failed == 0 ? 0 : 1;", "}", "")
    return w.lines


def generate_sh(blocks, md):
    out = ["#!/usr/bin/env bash",
           f"# Generated by tests/docs/extract_doctests.py from the `doctest: sh` blocks of {md}.",
           "# Usage: <this> <folder of the posenc CLI>; runs in an empty temporary folder.",
           "set -euo pipefail", 'export PATH="$1:$PATH"',
           'doc_dir="$(mktemp -d)"', "trap 'rm -rf \"$doc_dir\"' EXIT", 'cd "$doc_dir"',
           "doc_off=0",
           f"trap 'echo \"{md}:$((LINENO + doc_off)): error: command failed\" >&2' ERR"]
    for b in blocks:
        if b.mode != "sh":
            continue
        out.append(f"doc_off={b.line - (len(out) + 2)}")
        out.extend(b.lines)
    out.append(f'echo "{md}: shell blocks ran"')
    return out


def write(path, lines):
    # always written (a fresh time stamp), so the build does not re-run the extraction
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True, help="repository root (paths are named from it)")
    ap.add_argument("--md", required=True)
    ap.add_argument("--cpp", required=True)
    ap.add_argument("--sh")
    a = ap.parse_args()
    md = os.path.relpath(os.path.abspath(a.md), os.path.abspath(a.root)).replace(os.sep, "/")
    try:
        with open(a.md, encoding="utf-8") as f:
            blocks = parse_blocks(f.read())
        errors = []
        for b in blocks:
            try:
                b.mode = classify(b, md)
            except DocError as e:
                errors.append(str(e))
        if errors:
            raise DocError("\n".join(errors))
        write(a.cpp, generate_cpp(blocks, md, os.path.abspath(a.cpp)))
        if a.sh:
            if not any(b.mode == "sh" for b in blocks):
                raise DocError(f"{md}:1: error: no `<!-- doctest: sh -->` block")
            write(a.sh, generate_sh(blocks, md))
    except DocError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
