#!/usr/bin/env bash
# Installs what loom needs, builds it, and runs loom's main job: an allreduce sweep
# (8 B to 256 MiB) on 4 local ranks, in nccl-tests' units. Extra arguments go to loom-perf.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh > /dev/null
exec "${LOOM_BUILD_DIR:-build}"/perf/loom-perf all_reduce -b 8 -e 256M -f 2 -N 4 "$@"
