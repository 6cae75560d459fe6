#!/usr/bin/env python3
"""Checks docs/ARCHITECTURE.md's layering against the build and the source, and that the
source cites only files that exist.

Usage: tests/check_architecture.py [SOURCE_ROOT]   (default: the folder above this script)

1. The "## Layers" section's two tables (the library's layers, and the folders above the
   library) against the `loom_layer(NAME FOLDERS ...)` declarations of the top-level
   CMakeLists.txt: the same layers, each compiled against exactly the folders its row names
   (and itself).
2. Every `#include "folder/..."` of every top-level folder against the tables: a folder that
   holds sources must have a row, and every folder -> folder edge must be one its row allows.
   A folder above the library may use "the library" (every layer and include/loom/), or only
   "the public API" (include/loom/), and the folders (or layers) its row names; a row may name
   a subfolder (`bindings/nccl-net/`), which then owns its files; a layer may use the layers its row names, which must point one way
   (no cycle).
3. Every path a source file, script or doc names (`comm/comm.h`, `docs/TUNING.md`) exists in
   the tree: relative to the source root, to the naming file's folder, or as the tail of a
   path in the tree (`shm/shm_arena.h`).
4. The program the README shows is examples/two_ranks.c as it is (which ctest builds and runs).

Prints each mismatch and exits 1 if there is any.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
PUBLIC = "include"  # include/loom/loom.h: "loom/..." in an #include
SOURCE_EXTENSIONS = (".c", ".cc", ".h")
CITING_EXTENSIONS = SOURCE_EXTENSIONS + (".py", ".sh", ".cmake", ".in", ".md", ".txt")
# Generated measurements and test inputs: their text is data, not citations.
NOT_CHECKED_FOR_CITATIONS = ("docs/calibration/", "docs/perf/", "tests/unit/data/")

errors = []


def tree_files():
    """Paths of the source tree's files, relative to ROOT: git's tracked and untracked files
    that it does not ignore, or, outside a git checkout, every file but build folders'."""
    try:
        listed = subprocess.run(["git", "-C", ROOT, "ls-files", "--cached", "--others",
                                 "--exclude-standard", "-z"], capture_output=True, check=True)
        return sorted(p for p in set(listed.stdout.decode().split("\0"))
                      if p and os.path.isfile(os.path.join(ROOT, p)))
    except (OSError, subprocess.CalledProcessError):
        pass
    out = []
    for folder, dirs, files in os.walk(ROOT):
        rel = os.path.relpath(folder, ROOT)
        dirs[:] = [d for d in dirs if not d.startswith(".") and
                   not (rel == "." and d.startswith("build"))]
        out += [os.path.normpath(os.path.join(rel, f)) for f in files]
    return sorted(out)


def folder_names(cell):
    """`base/`, `tools/` ... in a table cell, without the slash; "the library" as itself."""
    names = [n.strip("/") for n in re.findall(r"`([^`]+)`", cell)]
    for phrase in ("the library", "the public API"):
        if phrase in cell:
            names.append(phrase)
    return names


def parse_layers_section(text):
    """(library rows, upper rows): each an ordered dict folder -> allowed folders."""
    section = text.split("\n## Layers", 1)
    if len(section) < 2:
        errors.append("docs/ARCHITECTURE.md: no '## Layers' section")
        return {}, {}
    section = section[1].split("\n## ", 1)[0]
    tables = {"layer": {}, "folder": {}}
    current = None
    for line in section.splitlines():
        if not line.startswith("|"):
            current = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if current is None:
            current = tables.get(cells[0])
            if current is None:
                errors.append(f"docs/ARCHITECTURE.md: a table under Layers whose first column is "
                              f"'{cells[0]}', not 'layer' or 'folder'")
                current = {}
            continue
        if set(cells[0]) <= set("-: "):
            continue
        names = folder_names(cells[0])
        if len(names) != 1 or len(cells) < 2:
            errors.append(f"docs/ARCHITECTURE.md: cannot read the row '{line}'")
            continue
        current[names[0]] = folder_names(cells[1])
    if not tables["layer"]:
        errors.append("docs/ARCHITECTURE.md: no table of layers ('| layer | may use | ...')")
    return tables["layer"], tables["folder"]


def parse_cmake_layers(text):
    """loom_layer(NAME FOLDERS a b ... [EXCLUDE files]) declarations: NAME -> set of folders."""
    layers = {}
    for m in re.finditer(r"^\s*loom_layer\(\s*(\w+)\s+FOLDERS\s+([^)]*)\)", text, re.M):
        layers[m.group(1)] = set(m.group(2).split("EXCLUDE")[0].split())
    return layers


def owner(path, rows):
    """The folder a path belongs to: the deepest row folder that holds it (a row may name a
    subfolder, `bindings/nccl-net/`, that may use more than its parent), else its top folder."""
    best = path.split("/")[0]
    for folder in rows:
        if path.startswith(folder + "/") and len(folder) > len(best):
            best = folder
    return best


def include_edges(files, top_folders, rows=()):
    """(from folder, to folder) -> first file that includes across, for every #include "x/..."
    whose first part is a top-level folder (or loom/, the public header); a folder is the
    deepest row folder that holds the file, or the included path."""
    edges = {}
    for path in files:
        if not path.endswith(SOURCE_EXTENSIONS) or "/" not in path:
            continue
        source = owner(path, rows)
        with open(os.path.join(ROOT, path), errors="replace") as f:
            for line in f:
                m = re.match(r'\s*#\s*include\s+"(([^"/]+)/[^"]*)"', line)
                if not m:
                    continue
                target = PUBLIC if m.group(2) == "loom" else owner(m.group(1), rows)
                if target != source and target.split("/")[0] in top_folders:
                    edges.setdefault((source, target), path)
    return edges


def check_against_build(library, cmake):
    """(1) The library's rows against the build's loom_layer declarations."""
    for layer in sorted(set(library) | set(cmake)):
        if layer not in cmake:
            errors.append(f"layer {layer}/: in docs/ARCHITECTURE.md, not a loom_layer in "
                          f"CMakeLists.txt")
        elif layer not in library:
            errors.append(f"layer {layer}/: a loom_layer in CMakeLists.txt, not in "
                          f"docs/ARCHITECTURE.md's table of layers")
        elif set(library[layer]) | {layer} != cmake[layer]:
            errors.append(f"layer {layer}/: docs/ARCHITECTURE.md allows "
                          f"{sorted(set(library[layer]) | {layer})}, CMakeLists.txt compiles it "
                          f"against {sorted(cmake[layer])}")
    for layer, uses in library.items():
        for used in uses:
            if used not in library:
                errors.append(f"layer {layer}/ may use {used}/, which is not a layer")


def allowed_folders(library, upper, top_folders):
    """Folder -> the folders it may include, "the library" spelled out."""
    allowed = {layer: set(uses) | {PUBLIC} for layer, uses in library.items()}
    for folder, uses in upper.items():
        if folder in library:
            errors.append(f"{folder}/ is in both tables of docs/ARCHITECTURE.md")
        expanded = set()
        for used in uses:
            if used == "the library":
                expanded |= set(library) | {PUBLIC}
            elif used == "the public API":
                expanded.add(PUBLIC)
            elif used in upper or used in library:
                expanded.add(used)
            else:
                errors.append(f"{folder}/ may use {used}/, which neither table lists")
        allowed[folder] = expanded
    for folder in sorted(allowed):
        if folder not in top_folders:
            errors.append(f"{folder}/: in docs/ARCHITECTURE.md, not in the source tree")
    return allowed


def check_includes(edges, allowed):
    """(2) Every folder -> folder include edge against what the tables allow."""
    for (source, target), path in sorted(edges.items()):
        if source not in allowed:
            errors.append(f"{source}/ holds sources ({path}) but has no row in "
                          f"docs/ARCHITECTURE.md's Layers")
        elif target not in allowed[source]:
            errors.append(f"{path} includes {target}/: docs/ARCHITECTURE.md does not let "
                          f"{source}/ use {target}/")


def check_one_way(allowed, folders):
    """No cycle through `folders` in what the tables allow."""
    state = {}

    def visit(folder, trail):
        if state.get(folder) == "done":
            return
        if state.get(folder) == "open":
            errors.append("docs/ARCHITECTURE.md's layering has a cycle: " +
                          " -> ".join(trail[trail.index(folder):] + [folder]))
            return
        state[folder] = "open"
        for used in sorted(allowed.get(folder, ())):
            visit(used, trail + [folder])
        state[folder] = "done"

    for folder in sorted(folders):
        visit(folder, [])


def check_layers(files):
    with open(os.path.join(ROOT, "docs/ARCHITECTURE.md")) as f:
        library, upper = parse_layers_section(f.read())
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        cmake = parse_cmake_layers(f.read())
    top_folders = {p.split("/")[0] for p in files if "/" in p}
    folders = {p.rsplit("/", i)[0] for p in files for i in range(1, p.count("/") + 1)}
    check_against_build(library, cmake)
    allowed = allowed_folders(library, upper, folders)
    check_includes(include_edges(files, top_folders, set(library) | set(upper)), allowed)
    check_one_way(allowed, allowed)


# A path with a folder and a file name of a kind the tree holds, e.g. comm/comm.h.
CITED = re.compile(r"(?<![\w./$<>*{-])((?:[A-Za-z_][\w.-]*/)+[\w.-]+\.(?:h|cc|c|md|py|sh|cmake|json|txt))"
                   r"(?![\w]|\.\w)")


def check_citations(files):
    present = set(files)
    for path in files:
        if not path.endswith(CITING_EXTENSIONS) or path.startswith(NOT_CHECKED_FOR_CITATIONS):
            continue
        here = os.path.dirname(path)
        with open(os.path.join(ROOT, path), errors="replace") as f:
            for number, line in enumerate(f, 1):
                for cited in CITED.findall(line):
                    if cited.startswith(("build/", "build-")) or cited.split("/")[0].isupper():
                        continue  # build outputs, and placeholders (OUT/all_reduce.json)
                    candidates = (os.path.normpath(cited), os.path.normpath(os.path.join(here, cited)))
                    if any(c in present for c in candidates):
                        continue
                    if any(p.endswith("/" + cited) for p in present):
                        continue
                    errors.append(f"{path}:{number}: names {cited}, which is not in the tree")


def check_readme_example():
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    with open(os.path.join(ROOT, "examples/two_ranks.c")) as f:
        example = f.read()
    if "```c\n" + example + "```" not in readme:
        errors.append("README.md does not show examples/two_ranks.c as it is")


def main():
    files = tree_files()
    check_layers(files)
    check_citations(files)
    check_readme_example()
    for e in errors:
        print(e)
    if errors:
        print(f"{len(errors)} mismatch(es) between docs/ARCHITECTURE.md, the build and the source")
        return 1
    print("docs/ARCHITECTURE.md's layers match CMakeLists.txt and every #include; "
          "every cited path exists; the README shows examples/two_ranks.c")
    return 0


if __name__ == "__main__":
    sys.exit(main())
