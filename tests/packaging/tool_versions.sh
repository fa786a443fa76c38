#!/bin/sh
# tool_versions.sh VERSION HEADER PROGRAM...: every program prints
# "NAME (xcoll) VERSION" for --version and exits 0, VERSION being the
# project version CMake knows; include/xcoll.h's XCOLL_VERSION_MAJOR/MINOR/
# PATCH must say the same version.
set -u
version=$1
header=$2
shift 2
status=0
header_version=$(awk '/^#define XCOLL_VERSION_(MAJOR|MINOR|PATCH) / { v[$2] = $3 }
  END { print v["XCOLL_VERSION_MAJOR"] "." v["XCOLL_VERSION_MINOR"] "." v["XCOLL_VERSION_PATCH"] }' "$header")
if [ "$header_version" != "$version" ]; then
  echo "FAIL: $header says $header_version, CMakeLists.txt's project() says $version"
  status=1
fi
for program in "$@"; do
  name=$(basename "$program")
  case $name in
  *-trace-merge) command -v python3 >/dev/null || { echo "skip $name: no python3"; continue; } ;;
  esac
  out=$("$program" --version 2>&1)
  rc=$?
  want="$name (xcoll) $version"
  if [ $rc -ne 0 ] || [ "$out" != "$want" ]; then
    echo "FAIL: $program --version: exit $rc, printed '$out', expected '$want' and exit 0"
    status=1
  else
    echo "ok: $out"
  fi
done
exit $status
