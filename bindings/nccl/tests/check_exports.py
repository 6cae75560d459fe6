#!/usr/bin/env python3
"""Checks loom's libnccl.so.2 against NCCL's own ABI shell.

Usage: check_exports.py OURS [REAL]

OURS must: have the SONAME libnccl.so.2; export only nccl*/pnccl* symbols (no C++ symbol, nothing
of loom's), every one a function; each ncclX weak and its pncclX strong (ncclX without a twin:
strong); and, when REAL (NCCL's own library) exists, export every nccl*/pnccl* function REAL
exports, with the same binding. Exits 1 on any difference, 77 (skipped, saying why) when REAL
is given but absent."""
import os
import re
import subprocess
import sys

errors = []


def defined_symbols(path):
    """name -> nm type letter of the dynamic symbols the library defines."""
    out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True,
                         check=True).stdout
    symbols = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3:
            symbols[parts[2]] = parts[1]
    return symbols


def soname(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True,
                         check=True).stdout
    m = re.search(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", out)
    return m.group(1) if m else None


def check_ours(ours):
    if soname(ours) != "libnccl.so.2":
        errors.append(f"{ours}: SONAME is {soname(ours)}, not libnccl.so.2")
    for name, kind in sorted(ours_symbols.items()):
        if not (name.startswith("nccl") or name.startswith("pnccl")):
            errors.append(f"exports {name} ({kind}), which is not an NCCL name")
        elif kind not in "WT":
            errors.append(f"{name} is a '{kind}' symbol, not a function")
        elif name.startswith("pnccl") and kind != "T":
            errors.append(f"{name} is '{kind}', not strong (T)")
        elif name.startswith("nccl"):
            twin = "p" + name
            expected = "W" if twin in ours_symbols else "T"
            if kind != expected:
                errors.append(f"{name} is '{kind}', expected '{expected}'" +
                              (" (a weak alias of its pnccl twin)" if expected == "W" else ""))


def check_against_real(real):
    real_symbols = {n: k for n, k in defined_symbols(real).items()
                    if n.startswith(("nccl", "pnccl"))}
    for name, kind in sorted(real_symbols.items()):
        if name not in ours_symbols:
            errors.append(f"{real} exports {name} ({kind}); ours does not")
        elif ours_symbols[name] != kind:
            errors.append(f"{name}: '{ours_symbols[name]}' in ours, '{kind}' in {real}")
    return len(real_symbols)


if len(sys.argv) not in (2, 3):
    sys.exit(__doc__)
ours_symbols = defined_symbols(sys.argv[1])
check_ours(sys.argv[1])
compared = ""
if len(sys.argv) == 3:
    real = sys.argv[2]
    if not os.path.isfile(real):
        print(f"skipped: NCCL's own libnccl.so.2 is not here ({real}); install the CUDA "
              "toolkit's NCCL or set LOOM_NCCL_REAL_LIBRARY to compare with it")
        sys.exit(77)
    compared = f"; all {check_against_real(real)} NCCL functions of {real} exported alike"
for e in errors:
    print(e)
if errors:
    print(f"{len(errors)} problem(s) with {sys.argv[1]}'s exports")
    sys.exit(1)
print(f"{sys.argv[1]}: SONAME libnccl.so.2, {len(ours_symbols)} exports, only nccl*/pnccl*, "
      f"ncclX weak over strong pncclX{compared}")
