#!/usr/bin/env bash
# Installs the build into a scratch prefix, then builds a consumer with find_package(ckpt) and with pkg-config.
set -euo pipefail
build=$1 source=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
libdir=$(dirname "$(find "$work/prefix" -name 'libckpt.so' | head -1)")

cmake -S "$source/consumer" -B "$work/cmake-consumer" -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log"
cmake --build "$work/cmake-consumer" > "$work/build.log"
LD_LIBRARY_PATH="$libdir" "$work/cmake-consumer/consumer"

export PKG_CONFIG_PATH="$libdir/pkgconfig"
cc -std=c99 -o "$work/pc-consumer" "$source/consumer/main.c" $(pkg-config --cflags --libs ckpt)
LD_LIBRARY_PATH="$libdir" "$work/pc-consumer"

soname=$(objdump -p "$libdir/libckpt.so" | awk '/SONAME/ {print $2}')
[ "$soname" = "libckpt.so.0" ] || { echo "SONAME is '$soname', expected libckpt.so.0" >&2; exit 1; }
echo "install: find_package, pkg-config and SONAME $soname OK"
