#!/usr/bin/env bash
# The Python package installed both ways, then imported and run (a 1-rank all_reduce) with
# neither the build tree on PYTHONPATH nor LD_LIBRARY_PATH, checking which libloom.so it loaded:
# `cmake --install` into a temporary prefix (the package finds the prefix's libloom.so by its
# RUNPATH), and `pip install --no-build-isolation` from a copy of the source tree (libloom.so
# inside the package). Exit 77 (skipped) without pip, setuptools or wheel.
# Usage: check_install.sh BUILD_DIR PYTHON SOURCE_DIR
set -euo pipefail
build="$1"
python="$2"
source="$3"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# $1: the folder to import loom from; $2: the folder libloom.so must be loaded from.
check() {
  env -u LD_LIBRARY_PATH PYTHONPATH="$1" "$python" -B - "$2" << 'EOF_PY'
import os
import sys
import numpy as np
import loom
with loom.Communicator(loom.UniqueId(), 0, 1) as comm:
    assert comm.all_reduce(np.arange(3.0)).tolist() == [0.0, 1.0, 2.0]
assert loom.info()["version"] == loom.__version__
loaded = {line.split()[-1] for line in open("/proc/self/maps") if "libloom.so" in line}
assert loaded and all(path.startswith(sys.argv[1] + "/") for path in loaded), loaded
if os.path.exists(os.path.join(os.path.dirname(loom.__file__), "torch.py")):
    import torch.distributed as dist
    import loom.torch
    assert "LOOM" in dist.Backend._plugins
print("loom", loom.__version__, "from", loom.__file__, "with", *loaded)
EOF_PY
}

cmake --install "$build" --prefix "$tmp/prefix" > "$tmp/install.log"
package="$(find "$tmp/prefix" -path '*/loom/__init__.py')"
check "$(dirname "$(dirname "$package")")" "$tmp/prefix/lib"

if ! { "$python" -c "import setuptools, wheel" && "$python" -m pip --version; } &> /dev/null; then
  echo "skipped pip install: $python lacks pip, setuptools or wheel (Debian: python3-pip" \
       "python3-setuptools python3-wheel)"
  exit 77
fi
# pip builds in the folder it installs from: a copy, in the build tree. setup.py's CMake builds
# in the copy's build-pip/, as deep in the copy as build/ is in the tree, so that ccache (where
# installed, with CCACHE_BASEDIR above both and CCACHE_NOHASHDIR=1, as scripts/test.sh sets)
# finds the objects build/ compiled rather than compiling libloom a second time.
copy="$build/python-pip-test"
rm -rf "$copy"
mkdir -p "$copy"
(cd "$source" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$copy")
"$python" -m pip install --no-build-isolation --no-deps --no-cache-dir --target "$tmp/pip" \
  "$copy/bindings/python" > "$tmp/pip.log" 2>&1 || { cat "$tmp/pip.log"; exit 1; }
check "$tmp/pip" "$tmp/pip/loom"
