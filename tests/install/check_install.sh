#!/usr/bin/env bash
# Installs the build into a temporary prefix, then builds a consumer with find_package(loom)
# and another with pkg-config, and runs both; the drop-in libnccl.so.2, where built, must find
# the installed libloom.so.
set -euo pipefail
build="$1"
here="$(cd "$(dirname "$0")" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" > "$tmp/install.log"
libdir="$(dirname "$(find "$tmp/prefix" -name 'libloom.so*' -o -name 'libloom.a' | head -1)")"
cmake -S "$here/consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" > "$tmp/cfg.log"
cmake --build "$tmp/consumer" > "$tmp/build.log"
LD_LIBRARY_PATH="$libdir" "$tmp/consumer/consumer"
export PKG_CONFIG_PATH="$libdir/pkgconfig"
# shellcheck disable=SC2046
cc -std=c99 -Wall -Wextra -pedantic -o "$tmp/pc_consumer" "$here/consumer/main.c" \
  $(pkg-config --cflags --libs loom)
LD_LIBRARY_PATH="$libdir" "$tmp/pc_consumer"
# The drop-in libnccl.so.2, where the build made one: installed in its own folder (it shadows no
# real NCCL), it finds the installed libloom.so by itself.
if [ -e "$build/nccl/libnccl.so.2" ]; then
  nccl="$libdir/loom-nccl/libnccl.so.2"
  found="$(env -u LD_LIBRARY_PATH ldd "$nccl" | awk '/libloom\.so/ {print $3}')"
  if [ -z "$found" ] || [ "$(realpath "$found")" != "$(realpath "$libdir"/libloom.so.*.*)" ]; then
    echo "$nccl does not find the installed libloom.so (it found '$found')" >&2
    exit 1
  fi
fi
