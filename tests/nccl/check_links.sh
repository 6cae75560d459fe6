#!/bin/sh
# check_links.sh EXE LIBNCCL [PROVIDER]
#
# EXE needs libnccl.so.2 (readelf's NEEDED), the loader resolves that name to the file LIBNCCL
# (ldd, compared by real path), and, with PROVIDER, every nccl* function EXE leaves undefined
# is one that PROVIDER defines: the program built against NCCL's library needs nothing of it
# that loom's lacks. Exits 1 on the first difference.
set -eu
exe=$1
lib=$2
provider=${3:-}
fail() { echo "FAIL: $*" >&2; exit 1; }

readelf -d "$exe" | grep -q 'NEEDED.*\[libnccl\.so\.2\]' ||
  fail "$exe does not need libnccl.so.2: $(readelf -d "$exe" | grep NEEDED)"
resolved=$(ldd "$exe" | awk '$1 == "libnccl.so.2" { print $3 }')
[ -n "$resolved" ] && [ "$resolved" != "not" ] || fail "the loader finds no libnccl.so.2 for $exe"
[ "$(realpath "$resolved")" = "$(realpath "$lib")" ] ||
  fail "libnccl.so.2 of $exe resolves to $resolved, not $lib"
echo "$exe: libnccl.so.2 => $resolved"

[ -n "$provider" ] || exit 0
needed=$(nm -D --undefined-only "$exe" | awk '$2 ~ /^p?nccl/ { print $2 }' | sort -u)
[ -n "$needed" ] || fail "$exe uses no nccl* function"
defined=$(nm -D --defined-only "$provider" | awk '{ print $3 }' | sort -u)
missing=$(printf '%s\n' "$needed" | while read -r f; do
  printf '%s\n' "$defined" | grep -qx "$f" || echo "$f"
done)
[ -z "$missing" ] || fail "$provider lacks what $exe needs: $missing"
echo "$(printf '%s\n' "$needed" | wc -l) nccl functions $exe needs, all in $provider"
