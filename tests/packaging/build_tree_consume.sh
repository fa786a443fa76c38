#!/bin/sh
# build_tree_consume.sh MODE BUILD_DIR: build and run
# tests/packaging/consumer against BUILD_DIR itself, not installed, outside
# the source tree, with
#   MODE=cmake:      find_package(xcoll) with xcoll_DIR=BUILD_DIR
#                    (BUILD_DIR/xcollConfig.cmake and xcollTargets.cmake)
#   MODE=pkgconfig:  PKG_CONFIG_PATH=BUILD_DIR, cc $(pkg-config --cflags
#                    --libs xcoll) (BUILD_DIR/xcoll-uninstalled.pc)
# The flags must name BUILD_DIR's library and the source tree's header.
# CC, CFLAGS and LDFLAGS as in install_consume.sh. Exit 77 (skip) only when
# pkg-config is missing.
set -eu
mode=$1
build=$(cd "$2" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
source_include=$(cd "$here/../../include" && pwd)
command -v pkg-config >/dev/null || {
  echo "SKIP: pkg-config not found (apt-get install pkg-config, or scripts/setup.sh)"
  exit 77
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$here/consumer/consumer.c" "$here/consumer/CMakeLists.txt" "$work/"
mkdir "$work/nopc"

case $mode in
pkgconfig)
  flags=$(PKG_CONFIG_LIBDIR="$build" pkg-config --cflags --libs xcoll) ||
    { echo "FAIL: pkg-config --cflags --libs xcoll with $build on its path"; exit 1; }
  echo "pkg-config --cflags --libs xcoll: $flags"
  case $flags in
  *"-I$source_include"*) ;;
  *) echo "FAIL: the flags do not name the header's folder $source_include"; exit 1 ;;
  esac
  case $flags in
  *"-L$build "*|*"-L$build") ;;
  *) echo "FAIL: the flags do not name the build folder $build"; exit 1 ;;
  esac
  # shellcheck disable=SC2086 # flags are words
  ${CC:-cc} ${CFLAGS:-} -o "$work/consumer" "$work/consumer.c" $flags ${LDFLAGS:-}
  ;;
cmake)
  PKG_CONFIG_LIBDIR="$work/nopc" cmake -S "$work" -B "$work/build" \
    -Dxcoll_DIR="$build" >"$work/configure.log" 2>&1 ||
    { cat "$work/configure.log"; echo "FAIL: configuring the consumer against $build"; exit 1; }
  cmake --build "$work/build" >"$work/build.log" 2>&1 ||
    { cat "$work/build.log"; echo "FAIL: building the consumer"; exit 1; }
  cp "$work/build/consumer" "$work/consumer"
  ;;
*)
  echo "usage: $0 cmake|pkgconfig BUILD_DIR" >&2
  exit 2
  ;;
esac
LD_LIBRARY_PATH="$build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$work/consumer"
echo "OK: a consumer built with $mode against the build tree $build runs"
