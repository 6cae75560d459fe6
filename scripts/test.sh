#!/usr/bin/env bash
# Installs what loom needs, builds it, runs every test tier with ctest, then fuzzes each parser
# of outside input for a bounded time (scripts/fuzz.sh; LOOM_FUZZ_SECONDS per target, 0 skips),
# then runs the unit and multi-process tests under AddressSanitizer + UndefinedBehaviorSanitizer
# and those of threaded code under ThreadSanitizer (scripts/sanitize.sh; LOOM_SANITIZE=0 skips).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# ccache (installed above) keyed on paths relative to each compile's folder, and not on the
# folder itself: the test of `pip install` (install.python) builds libloom again from a copy of
# the tree, in a folder as deep as build/, and finds build/'s objects instead of compiling them.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
scripts/build.sh
# The unit tier two at a time (each test one process, on the CPU alone); the other tiers one
# test at a time: the multi-process tests fork up to 8 ranks each on a 2-core machine, and their
# fault tests measure detection time.
(cd "${LOOM_BUILD_DIR:-build}" && ctest --output-on-failure --timeout 600 -L '^unit$' -j2 "$@" &&
  ctest --output-on-failure --timeout 600 -LE '^unit$' "$@")
if [[ "${LOOM_FUZZ_SECONDS:-10}" != 0 ]]; then
  start=$SECONDS
  scripts/fuzz.sh
  echo "fuzz stage: $((SECONDS - start)) s (build and every target)"
fi
if [[ "${LOOM_SANITIZE:-1}" != 0 ]]; then
  start=$SECONDS
  scripts/sanitize.sh
  echo "sanitize stage: $((SECONDS - start)) s (both builds and their tests)"
fi
