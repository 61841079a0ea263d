#!/usr/bin/env bash
# Builds the packages for users of the C library (and of the Rust and Go bindings over it): a Debian package
# ckpt_<version>_<arch>.deb and an archive ckpt-<version>-linux-<arch>.tar.gz of the same files
# (cmake/packaging.cmake).
#
# Usage: tools/package_c.sh BUILD_DIR OUT_DIR
#   Configures BUILD_DIR (Release, Ninja, prefix /usr, no tests, examples or benchmarks, no fault injection), builds
#   it, runs cpack there and copies both packages into OUT_DIR; prints their names and sizes and the .deb's Depends.
# Needs dpkg-dev (dpkg-shlibdeps computes the Depends), file and the project's build dependencies (tools/deps.sh).
set -euo pipefail

die() { echo "package_c.sh: $*" >&2; exit 1; }

[[ $# -eq 2 ]] || { sed -n '/^# Usage:/,/^# Needs/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
build_dir=$1 out_dir=$2
source_dir=$(cd "$(dirname "$0")/.." && pwd)
for tool in cmake ninja cpack dpkg-shlibdeps dpkg-deb file; do
  command -v "$tool" >/dev/null || die "$tool is missing (Debian: tools/deps.sh installs the build machine's packages)"
done

mkdir -p "$build_dir"
# Fault injection, sanitizers and the wheel's build are named explicitly, so that a cache left by another build
# cannot carry them into a package.
cmake -S "$source_dir" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
  -DCKPT_BUILD_TESTS=OFF -DCKPT_BUILD_EXAMPLES=OFF -DCKPT_BUILD_BENCHMARKS=OFF \
  -DCKPT_FAULT_INJECTION=OFF -DCKPT_SANITIZE= -DCKPT_PYTHON_WHEEL=OFF \
  >"$build_dir/configure.log" 2>&1 || { cat "$build_dir/configure.log" >&2; die "configure failed"; }
cmake --build "$build_dir" >"$build_dir/build.log" 2>&1 || { tail -40 "$build_dir/build.log" >&2; die "build failed"; }

# Stale packages of another version must not be picked up below.
rm -f "$build_dir"/ckpt_*.deb "$build_dir"/ckpt-*.tar.gz
(cd "$build_dir" && cpack) >"$build_dir/cpack.log" 2>&1 || { cat "$build_dir/cpack.log" >&2; die "cpack failed"; }

shopt -s nullglob
debs=("$build_dir"/ckpt_*.deb)
archives=("$build_dir"/ckpt-*.tar.gz)
[[ ${#debs[@]} -eq 1 && ${#archives[@]} -eq 1 ]] ||
  die "cpack made ${#debs[@]} .deb and ${#archives[@]} .tar.gz in $build_dir, expected one of each (see cpack.log)"
mkdir -p "$out_dir"
cp "${debs[0]}" "${archives[0]}" "$out_dir/"
for package in "${debs[0]}" "${archives[0]}"; do
  echo "$(basename "$package") $(stat -c %s "$package") bytes"
done
echo "Depends: $(dpkg-deb --field "${debs[0]}" Depends)"
