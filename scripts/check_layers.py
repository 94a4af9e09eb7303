#!/usr/bin/env python3
"""Checks that posenc's headers include only headers of their own layer or of the layers
below it (docs/architecture.md):

    core       core/, config.hpp, version.hpp      errors, views, tags, policy interface
    math       math/                               maths written once (host and device)
    io         io/                                 file formats; core only
    backend    backend/                            kernels: core, math, backend
    encoding   encoding/                           public encodings: + io, backend
    attention  attention/                          attention entry points: + encoding
    umbrella   posenc.hpp, attention.hpp, cuda.cuh anything

Every `#include "..."` (resolved against the including file's folder) and every
`#include <posenc/...>` is read. An include of a layer that is not allowed fails with both
file names, e.g.

    include/posenc/backend/scalar/flash.hpp: includes include/posenc/encoding/alibi.hpp
    (backend may include core, math, backend; encoding is above it)

Usage: check_layers.py [INCLUDE_DIR]      (default: the repository's include/)
       check_layers.py --self-test        plants an upward include in a copy of the tree
                                          and checks that it is reported (then exits 0)
Exit status 0: clean; 1: a forbidden include; 2: usage or an unknown file.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

# layer -> the layers its headers may include
ALLOWED = {
    "core": {"core"},
    "math": {"core", "math"},
    "io": {"core", "io"},
    "backend": {"core", "math", "backend"},
    "encoding": {"core", "math", "io", "backend", "encoding"},
    "attention": {"core", "math", "io", "backend", "encoding", "attention"},
    "umbrella": {"core", "math", "io", "backend", "encoding", "attention", "umbrella"},
}
TOP_LEVEL = {"config.hpp": "core", "version.hpp": "core", "posenc.hpp": "umbrella",
             "attention.hpp": "umbrella", "cuda.cuh": "umbrella"}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def layer_of(rel):
    """Layer of a header given by its path relative to include/posenc, or None."""
    parts = rel.split("/")
    if len(parts) == 1:
        return TOP_LEVEL.get(parts[0])
    return parts[0] if parts[0] in ALLOWED else None


def check(include_dir):
    """Returns the list of problems (strings) of the tree under include_dir."""
    root = os.path.join(include_dir, "posenc")
    problems = []
    for folder, _, files in sorted(os.walk(root)):
        for name in sorted(files):
            if not name.endswith((".hpp", ".cuh", ".h")):
                continue
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            layer = layer_of(rel)
            shown = os.path.relpath(path, os.path.dirname(include_dir))
            if layer is None:
                problems.append("%s: not in any layer (add its folder to scripts/check_layers.py)"
                                % shown)
                continue
            with open(path, encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    kind, target = m.groups()
                    if kind == '"':
                        target_path = os.path.normpath(os.path.join(folder, target))
                    elif target.startswith("posenc/"):
                        target_path = os.path.normpath(os.path.join(include_dir, target))
                    else:
                        continue  # a system or third-party header
                    target_rel = os.path.relpath(target_path, root).replace(os.sep, "/")
                    if target_rel.startswith(".."):
                        continue  # outside posenc (a quoted include of a user's file)
                    target_layer = layer_of(target_rel)
                    target_shown = os.path.relpath(target_path, os.path.dirname(include_dir))
                    if target_layer is None or not os.path.exists(target_path):
                        problems.append("%s:%d: includes %s, which is not a posenc header"
                                        % (shown, number, target_shown))
                    elif target_layer not in ALLOWED[layer]:
                        problems.append(
                            "%s:%d: includes %s (%s may include %s; %s is above it)"
                            % (shown, number, target_shown, layer,
                               ", ".join(sorted(ALLOWED[layer])), target_layer))
    return problems


def self_test(include_dir):
    """Plants `core/error.hpp -> encoding/alibi.hpp` in a copy and expects it reported."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "include")
        shutil.copytree(include_dir, copy)
        victim = os.path.join(copy, "posenc", "core", "error.hpp")
        with open(victim, "a", encoding="utf-8") as f:
            f.write('\n#include "../encoding/alibi.hpp"\n')
        run = subprocess.run([sys.executable, os.path.abspath(__file__), copy],
                             capture_output=True, text=True)
        out = run.stdout + run.stderr
        ok = (run.returncode == 1 and "posenc/core/error.hpp" in out
              and "posenc/encoding/alibi.hpp" in out)
        print(out.strip())
        print("self-test: the planted upward include was %s"
              % ("reported (pass)" if ok else "NOT reported (fail)"))
        return 0 if ok else 1


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    default = os.path.join(here, "..", "include")
    if argv[1:2] == ["--self-test"]:
        clean = check(os.path.normpath(argv[2] if len(argv) > 2 else default))
        if clean:
            print("\n".join(clean))
            print("self-test: the tree itself is not clean")
            return 1
        return self_test(os.path.normpath(argv[2] if len(argv) > 2 else default))
    if len(argv) > 2 or (len(argv) == 2 and argv[1].startswith("-")):
        print(__doc__)
        return 2
    include_dir = os.path.normpath(argv[1] if len(argv) == 2 else default)
    if not os.path.isdir(os.path.join(include_dir, "posenc")):
        print("check_layers: no posenc/ under %s" % include_dir)
        return 2
    problems = check(include_dir)
    for p in problems:
        print(p)
    if problems:
        print("check_layers: %d forbidden include(s)" % len(problems))
        return 1
    print("check_layers: every include stays in its layer or goes down")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
