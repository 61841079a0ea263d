#!/usr/bin/env bash
# Configures ckpt's source tree in a scratch build directory with a build dependency hidden, and checks that
# configuration fails with ckpt's own message (cmake/dependencies.cmake) and that the message contains each expected
# text: the dependency's name and the packages that provide it.
#
# Usage: missing_dependency.sh SOURCE_DIR [--hide-pc MODULE]... [--expect TEXT]... [-- CMAKE_ARGUMENT...]
#   --hide-pc MODULE  configure with a pkg-config search path holding every .pc file of this machine but MODULE.pc
#   --expect TEXT     the failure's output must contain TEXT
#   after --          passed to cmake, e.g. -DCMAKE_DISABLE_FIND_PACKAGE_CapnProto=TRUE to hide a CMake package
# The environment's CMAKE (default: cmake) is the cmake to run.
set -euo pipefail

usage() {
  echo "usage: $0 SOURCE_DIR [--hide-pc MODULE]... [--expect TEXT]... [-- CMAKE_ARGUMENT...]" >&2
  exit 2
}

[[ $# -ge 1 ]] || usage
source_dir=$1
shift
hidden_modules=()
expected_texts=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --hide-pc) [[ $# -ge 2 ]] || usage; hidden_modules+=("$2"); shift 2 ;;
    --expect) [[ $# -ge 2 ]] || usage; expected_texts+=("$2"); shift 2 ;;
    --) shift; break ;;
    *) echo "$0: unknown argument '$1'" >&2; usage ;;
  esac
done
[[ -f $source_dir/CMakeLists.txt ]] || { echo "$0: no CMakeLists.txt in '$source_dir'" >&2; exit 2; }

scratch=$(mktemp -d "${TMPDIR:-/tmp}/ckpt-missing-dependency.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

cmake_environment=()
if [[ ${#hidden_modules[@]} -gt 0 ]]; then
  # pkg-config reads PKG_CONFIG_LIBDIR instead of its built-in search path: a folder of links to every .pc file it
  # would find (the first of each name, as pkg-config takes it) but the hidden modules'.
  pc_dir=$scratch/pkgconfig
  mkdir "$pc_dir"
  search_path="${PKG_CONFIG_PATH:+$PKG_CONFIG_PATH:}$(pkg-config --variable pc_path pkg-config)"
  IFS=: read -ra search_dirs <<<"$search_path"
  for dir in "${search_dirs[@]}"; do
    for pc_file in "$dir"/*.pc; do
      if [[ -e $pc_file && ! -e $pc_dir/${pc_file##*/} ]]; then
        ln -s "$pc_file" "$pc_dir/"
      fi
    done
  done
  for module in "${hidden_modules[@]}"; do
    # A module this machine lacks would leave nothing to hide, and the test would prove nothing.
    [[ -e $pc_dir/$module.pc ]] || { echo "$0: no $module.pc in $search_path: nothing to hide" >&2; exit 2; }
    rm "$pc_dir/$module.pc"
  done
  cmake_environment=(env -u PKG_CONFIG_PATH PKG_CONFIG_LIBDIR="$pc_dir")
  # CMake would add its prefix paths' pkgconfig folders to the search.
  set -- "$@" -DPKG_CONFIG_USE_CMAKE_PREFIX_PATH=OFF
fi

log=$scratch/configure.log
if "${cmake_environment[@]}" "${CMAKE:-cmake}" -S "$source_dir" -B "$scratch/build" -DCKPT_BUILD_TESTS=OFF \
     -DCKPT_BUILD_EXAMPLES=OFF -DCKPT_BUILD_BENCHMARKS=OFF "$@" >"$log" 2>&1; then
  cat "$log"
  echo "FAIL: configuration succeeded, hiding pkg-config modules '${hidden_modules[*]}' and passing cmake '$*';" \
       "it should have failed naming what is missing" >&2
  exit 1
fi
failed=0
for text in "ckpt cannot be built: build dependencies are missing." "${expected_texts[@]}"; do
  if ! grep -qF -- "$text" "$log"; then
    echo "FAIL: the configuration's output lacks: $text" >&2
    failed=1
  fi
done
if [[ $failed -ne 0 ]]; then
  cat "$log"
  exit 1
fi
# The message itself, for the test's log.
sed -n '/ckpt cannot be built/,/dnf install/p' "$log"
