#!/usr/bin/env bash
# Checks what `cmake --install` produces, from outside the build tree: check_install.sh CHECK BUILD SOURCE WORK, where
# SOURCE is tests/install and WORK a scratch folder whose prefix/ the `install` check fills for the others.
#   into-prefix              installs BUILD into WORK/prefix
#   consume                  a consumer of the shared library, built with find_package(ckpt) and with pkg-config
#   shared-without-capnp     find_package(ckpt) for the shared library where Cap'n Proto's CMake package is missing
#   static-finds-worker      a program linking libckpt.a saves through the installed I/O worker, nothing telling it
#                            where that is; run where the prefix is the configured one (a mount namespace), else 77
#   go-binding               bindings/go, copied out of the tree, builds against the install through pkg-config and
#                            saves on two ranks (GOFLAGS, GOCACHE and the like come from the caller)
set -euo pipefail
check=$1 build=$2 source=$3 work=$4
prefix="$work/prefix"
libdir() { dirname "$(find "$prefix" -name 'libckpt.so' | head -1)"; }

# Configures and builds tests/install/consumer into WORK/NAME with the given cache settings.
build_consumer() {
  local name=$1; shift
  rm -rf "$work/$name"
  cmake -S "$source/consumer" -B "$work/$name" -DCMAKE_PREFIX_PATH="$prefix" "$@" > "$work/$name.configure.log" ||
    { cat "$work/$name.configure.log"; exit 1; }
  cmake --build "$work/$name" > "$work/$name.build.log" || { cat "$work/$name.build.log"; exit 1; }
}

case "$check" in
  into-prefix)
    rm -rf "$work" && mkdir -p "$work"
    cmake --install "$build" --prefix "$prefix" > "$work/install.log" ;;
  consume)
    build_consumer cmake-consumer
    LD_LIBRARY_PATH="$(libdir)" "$work/cmake-consumer/consumer"
    PKG_CONFIG_PATH="$(libdir)/pkgconfig" cc -std=c99 -o "$work/pc-consumer" "$source/consumer/main.c" \
      $(PKG_CONFIG_PATH="$(libdir)/pkgconfig" pkg-config --cflags --libs ckpt)
    LD_LIBRARY_PATH="$(libdir)" "$work/pc-consumer"
    soname=$(objdump -p "$(libdir)/libckpt.so" | awk '/SONAME/ {print $2}')
    [ "$soname" = "libckpt.so.0" ] || { echo "SONAME is '$soname', expected libckpt.so.0" >&2; exit 1; }
    echo "install: find_package, pkg-config and SONAME $soname OK" ;;
  shared-without-capnp)
    build_consumer no-capnp-consumer -DCMAKE_DISABLE_FIND_PACKAGE_CapnProto=ON
    LD_LIBRARY_PATH="$(libdir)" "$work/no-capnp-consumer/consumer" ;;
  static-finds-worker)
    configured=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$build/CMakeCache.txt")
    consumer_args=(-DCONSUMER_STATIC=ON)
    # A sanitizer build's libckpt.a holds instrumented code: its program links with that compiler and runtime.
    if [ -n "${CKPT_CONSUMER_LINK_FLAGS:-}" ]; then
      consumer_args+=(-DCMAKE_C_COMPILER="$CKPT_CONSUMER_CC" -DCMAKE_CXX_COMPILER="$CKPT_CONSUMER_CXX"
                      "-DCMAKE_EXE_LINKER_FLAGS=$CKPT_CONSUMER_LINK_FLAGS")
    fi
    build_consumer static-consumer "${consumer_args[@]}"
    # libckpt.a knows the configured prefix only; this shows the scratch install there, to this command alone.
    if ! unshare --mount --propagation private true 2>/dev/null || [ ! -d "$configured" ]; then
      echo "static-finds-worker: cannot show the install at '$configured' (needs root and that folder): skipped" >&2
      exit 77
    fi
    mkdir -p "$work/static-run"
    cd "$work/static-run"
    env -u CKPT_WORKER_PATH unshare --mount --propagation private sh -c \
      'mount --bind "$1" "$2" && exec "$3" "$4"' sh "$prefix" "$configured" "$work/static-consumer/static_consumer" \
      "$work/static-run/checkpoint" ;;
  go-binding)
    rm -rf "$work/go-binding" && cp -r "$source/../../bindings/go" "$work/go-binding"
    cd "$work/go-binding"
    PKG_CONFIG_PATH="$(libdir)/pkgconfig" CGO_LDFLAGS="-Wl,-rpath,$(libdir)" \
      go test -count=1 -run 'TestDtypeSizesAndNamesComeFromTheLibrary|TestSaveOnTwoRanksCommitsACheckpoint' ./... ;;
  *)
    echo "check_install.sh: unknown check '$check'" >&2
    exit 2 ;;
esac
