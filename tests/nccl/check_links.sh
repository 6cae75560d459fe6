#!/bin/sh
# check_links.sh EXE LIBNCCL [PROVIDER HEADER]
#
# EXE needs libnccl.so.2 (readelf's NEEDED), the loader resolves that name to the file LIBNCCL
# (ldd, compared by real path), and, with PROVIDER and HEADER: every nccl* function EXE leaves
# undefined is one that PROVIDER defines (the program built against NCCL's library needs
# nothing of it that loom's lacks), and EXE calls every function HEADER (nccl.h) declares.
# Exits 1 on the first difference.
set -eu
exe=$1
lib=$2
provider=${3:-}
header=${4:-}
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
declared=$(grep -oE '^(ncclResult_t|const char\*|void) +nccl[A-Za-z]+\(' "$header" |
  sed -E 's/.*(nccl[A-Za-z]+)\($/\1/' | sort -u)
uncalled=$(printf '%s\n' "$declared" | while read -r f; do
  printf '%s\n' "$needed" | grep -qx "$f" || echo "$f"
done)
[ -z "$uncalled" ] || fail "$exe never calls these functions of $header: $uncalled"
echo "$exe calls all $(printf '%s\n' "$declared" | wc -l) functions $header declares"
