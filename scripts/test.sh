#!/usr/bin/env bash
# Installs what loom needs, builds it, and runs every test tier with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
cd "${LOOM_BUILD_DIR:-build}"
# One test at a time: the multi-process tests fork up to 8 ranks each on a 2-core machine, and
# their fault tests measure detection time.
ctest --output-on-failure --timeout 600 "$@"
