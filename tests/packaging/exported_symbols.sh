#!/bin/sh
# exported_symbols.sh LIBRARY HEADER: libxcoll.so must export exactly the
# functions declared in include/xcoll.h, nothing internal (xcoll_store_*,
# xcoll_tcp_*...) and no public function left hidden. The list of API names
# is read from the header, so it cannot drift from a hand-kept copy.
set -eu
lib=$1
header=$2
command -v nm >/dev/null || { echo "SKIP: nm not found (binutils)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Public names: every identifier xcoll_... followed by "(" in the header
# (declarations; names quoted in comments are API names too).
grep -o 'xcoll_[A-Za-z0-9_]*[[:space:]]*(' "$header" |
  sed 's/[[:space:]]*($//' | sort -u >"$tmp/api"
# Declared functions: a line that starts a declaration, with or without
# XCOLL_API, e.g. "XCOLL_API xcoll_status xcoll_barrier(xcoll_comm_t comm);".
grep -E '^(XCOLL_API )?[a-z_ ]+[ *]xcoll_[a-z0-9_]+\(' "$header" |
  sed -E 's/^.*[ *](xcoll_[a-z0-9_]+)\(.*/\1/' | sort -u >"$tmp/declared"
nm -D --defined-only "$lib" | awk 'NF >= 3 { print $3 }' | sort -u >"$tmp/exported"

if [ ! -s "$tmp/declared" ]; then
  echo "FAIL: found no function declarations in $header"
  exit 1
fi
status=0
extra=$(comm -23 "$tmp/exported" "$tmp/api")
if [ -n "$extra" ]; then
  echo "FAIL: $lib exports $(echo "$extra" | wc -l) symbol(s) not declared in $header:"
  echo "$extra" | sed 's/^/  /'
  echo "Internal functions must not be exported: the library is built with"
  echo "hidden visibility and only XCOLL_API declarations are default."
  status=1
fi
missing=$(comm -23 "$tmp/declared" "$tmp/exported")
if [ -n "$missing" ]; then
  echo "FAIL: functions declared in $header but not exported by $lib"
  echo "(is XCOLL_API missing on their declaration?):"
  echo "$missing" | sed 's/^/  /'
  status=1
fi
[ $status -eq 0 ] &&
  echo "OK: $lib exports the $(wc -l <"$tmp/declared") functions of $header and nothing else"
exit $status
