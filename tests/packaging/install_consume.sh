#!/bin/sh
# install_consume.sh MODE BUILD_DIR: install BUILD_DIR to a temporary
# prefix, move the prefix elsewhere (it must be relocatable), then build and
# run tests/packaging/consumer against it, outside the source tree, with
#   MODE=cmake:      find_package(xcoll) + target_link_libraries(xcoll::xcoll)
#   MODE=pkgconfig:  cc $(pkg-config --cflags --libs xcoll)
# Neither may need the development files of libsodium or UCX, which are
# private to libxcoll.so: pkg-config and CMake see only the installed prefix.
# CC, CFLAGS and LDFLAGS are used as cmake and cc use them (the tests set
# the sanitizer flags of a sanitized build). Exit 77 (skip) only when
# pkg-config is missing.
set -eu
mode=$1
build=$(cd "$2" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
command -v pkg-config >/dev/null || {
  echo "SKIP: pkg-config not found (apt-get install pkg-config, or scripts/setup.sh)"
  exit 77
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/staged" >"$work/install.log" ||
  { cat "$work/install.log"; exit 1; }
mv "$work/staged" "$work/moved" # nothing may still point at staged/
prefix=$work/moved
libdir=$(dirname "$(find "$prefix" -name 'libxcoll.so' | head -n 1)")
cp "$here/consumer/consumer.c" "$here/consumer/CMakeLists.txt" "$work/"
mkdir "$work/nopc" # an empty pkg-config path: no libsodium.pc, no ucx.pc

case $mode in
pkgconfig)
  pcdir=$(dirname "$(find "$prefix" -name xcoll.pc | head -n 1)")
  flags=$(PKG_CONFIG_LIBDIR="$pcdir" pkg-config --cflags --libs xcoll) || {
    echo "FAIL: pkg-config --cflags --libs xcoll failed with only $pcdir"
    echo "on its path (does xcoll.pc require libsodium or ucx?)"
    exit 1
  }
  echo "pkg-config --cflags --libs xcoll: $flags"
  case $flags in
  *"$prefix"/*) ;;
  *)
    echo "FAIL: the flags do not point into the moved prefix $prefix"
    echo "(xcoll.pc has a fixed prefix; it should use \${pcfiledir})"
    exit 1
    ;;
  esac
  # shellcheck disable=SC2086 # flags are words
  ${CC:-cc} ${CFLAGS:-} -o "$work/consumer" "$work/consumer.c" $flags ${LDFLAGS:-}
  ;;
cmake)
  PKG_CONFIG_LIBDIR="$work/nopc" cmake -S "$work" -B "$work/build" \
    -DCMAKE_PREFIX_PATH="$prefix" >"$work/configure.log" 2>&1 ||
    { cat "$work/configure.log"; echo "FAIL: configuring the consumer"; exit 1; }
  cmake --build "$work/build" >"$work/build.log" 2>&1 ||
    { cat "$work/build.log"; echo "FAIL: building the consumer"; exit 1; }
  cp "$work/build/consumer" "$work/consumer"
  ;;
*)
  echo "usage: $0 cmake|pkgconfig BUILD_DIR" >&2
  exit 2
  ;;
esac
LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$work/consumer"
echo "OK: a consumer built with $mode against the moved prefix runs"
