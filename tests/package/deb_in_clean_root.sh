#!/usr/bin/env bash
# Installs the Debian package (tools/package_c.sh) on a clean Debian bookworm that holds only a user's tools, and
# uses it there as an unprivileged user would, from C, CMake, Rust and Go:
#   install      `apt-get install ./ckpt_*.deb` pulls run-time libraries only (no -dev package), and the package
#                holds no static library
#   c            README.md's C quick start, built with `cc quickstart.c $(pkg-config --cflags --libs ckpt)`, saves
#                on 2 ranks under ckpt-launch; `ckpt verify` and `ckpt ls` read the checkpoint
#   cmake        tests/install/consumer finds the shared library with find_package(ckpt)
#   rust         bindings/rust/README.md's example, built with Debian's cargo offline against the installed
#                library (build.rs asks pkg-config), saves and loads on 2 ranks
#   go           bindings/go/README.md's saveRows, built with Debian's go through `#cgo pkg-config: ckpt`, saves
#                on 2 ranks
#   cmake-with-capnp-dev   `cmake` again once libcapnp-dev is installed too: ckptConfig.cmake then finds Cap'n Proto's
#                CMake package, and must still not look for the static library's files, which the package lacks
#
# Usage: tests/package/deb_in_clean_root.sh DIST_DIR ROOT
#   DIST_DIR holds one ckpt_*.deb; ROOT is made with tools/clean_root.sh and removed at the end unless KEEP_ROOT=1.
# Needs root on the host (tools/clean_root.sh) and the network to Debian's mirror.
set -euo pipefail

die() { echo "deb_in_clean_root.sh: $*" >&2; exit 1; }

[[ $# -eq 2 ]] || { sed -n '/^# Usage:/,/^# Needs root/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
dist_dir=$1 root=$2
source_dir=$(cd "$(dirname "$0")/../.." && pwd)
clean_root=$source_dir/tools/clean_root.sh
checks=$source_dir/tests/package/deb_checks
[[ $(id -u) == 0 ]] || die "must run as root (tools/clean_root.sh needs it)"

shopt -s nullglob
debs=("$dist_dir"/ckpt_*.deb)
[[ ${#debs[@]} -eq 1 ]] || die "expected one ckpt_*.deb in $dist_dir, found ${#debs[@]} (run tools/package_c.sh)"
deb=$(realpath "${debs[0]}")

# What each step copies into the root, prepared on the host: the sources the user would have.
work=$(mktemp -d)
stage=$work/stage
cleanup() {
  rm -rf "$work"
  if [[ ${KEEP_ROOT:-0} == 1 ]]; then
    echo "deb_in_clean_root.sh: root kept in $root"
  elif [[ -d $root ]]; then
    rm -rf --one-file-system "$root"
  fi
}
trap cleanup EXIT

# Prints the first fenced block of LANGUAGE (```LANGUAGE or ```LANGUAGE,attributes) under the heading line HEADING
# of FILE, up to the next "## " heading; fails where there is none.
extract_block() {
  local file=$1 heading=$2 language=$3
  awk -v heading="$heading" -v fence="\`\`\`$language" '
    $0 == heading { in_section = 1; next }
    in_section && !in_block && /^## / { exit }
    in_section && !in_block && ($0 == fence || index($0, fence ",") == 1) { in_block = 1; next }
    in_block && /^```/ { found = 1; exit }
    in_block { print }
    END { exit !found }' "$file" || die "no \`\`\`$language block under '$heading' in $file"
}

# A user's tools only: compilers and build tools of the four languages, nothing of ckpt's build dependencies.
user_packages=(gcc g++ libc6-dev make pkg-config cmake cargo rustc golang-go)

mkdir -p "$stage/c" "$stage/go/quickstart"
cp "$deb" "$stage/"
extract_block "$source_dir/README.md" "## Using it from C" c >"$stage/c/quickstart.c"
cp -r "$source_dir/tests/install/consumer" "$stage/cmake-consumer"
# The crate as a user gets it: its manifest, build script and sources (no target/ of an earlier build).
mkdir -p "$stage/rust/ckpt" "$stage/rust/quickstart/src"
cp -r "$source_dir/bindings/rust/"{Cargo.toml,build.rs,src} "$stage/rust/ckpt/"
cp "$checks/rust_quickstart.toml" "$stage/rust/quickstart/Cargo.toml"
extract_block "$source_dir/bindings/rust/README.md" "# ckpt for Rust" rust >"$stage/rust/quickstart/src/main.rs"
cp -r "$source_dir/bindings/go" "$stage/go/ckpt"
cp "$checks/go_quickstart.mod" "$stage/go/quickstart/go.mod"
{ cat "$checks/go_quickstart_main.go.in"; extract_block "$source_dir/bindings/go/README.md" "# ckpt for Go" go; } \
  >"$stage/go/quickstart/main.go"
cp "$checks"/*.sh "$stage/"

echo "deb_in_clean_root.sh: creating a bookworm root in $root with ${user_packages[*]}"
"$clean_root" create "$root" "${user_packages[@]}"
in_root() { "$clean_root" run "$root" "$@"; }
# The Go README's example saves to /ckpt/step-100, as a user's job would to a folder it owns.
install -d -o 1000 -g 1000 "$root/ckpt"

in_root --root --copy "$stage" /root -- bash /root/stage/install_deb.sh /root/stage/"$(basename "$deb")"
in_root --copy "$stage/c_quickstart.sh" /home/ckpt --copy "$stage/c" /home/ckpt -- bash c_quickstart.sh
in_root --copy "$stage/cmake_consumer.sh" /home/ckpt --copy "$stage/cmake-consumer" /home/ckpt -- \
  bash cmake_consumer.sh cmake
in_root --copy "$stage/rust_quickstart.sh" /home/ckpt --copy "$stage/rust" /home/ckpt -- bash rust_quickstart.sh
in_root --copy "$stage/go_quickstart.sh" /home/ckpt --copy "$stage/go" /home/ckpt -- bash go_quickstart.sh
in_root --root -- DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libcapnp-dev >"$work/capnp-dev.log" 2>&1 ||
  { cat "$work/capnp-dev.log" >&2; die "apt-get install libcapnp-dev failed in the root"; }
in_root -- bash cmake_consumer.sh cmake-with-capnp-dev
echo "deb_in_clean_root.sh: the Debian package works from C, CMake, Rust and Go on a clean bookworm"
