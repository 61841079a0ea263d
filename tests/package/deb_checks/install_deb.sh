#!/usr/bin/env bash
# Runs as root inside the clean root (tests/package/deb_in_clean_root.sh): installs the Debian package with apt, so
# that its Depends pull what it needs, and checks that they are run-time libraries only (no -dev package of ckpt's
# build dependencies, such as libcapnp-dev or liburing-dev) and that the package holds no static library.
# Usage: install_deb.sh DEB
set -euo pipefail
deb=$1
fail() { echo "install: $*" >&2; exit 1; }

installed_packages() { dpkg-query -W -f '${Package}\n' | sort; }
one_line() { paste -sd' ' <<<"$1"; }

apt-get update -qq || fail "apt-get update failed (is Debian's mirror reachable?)"
installed_packages >/tmp/before
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$deb" >/tmp/apt.log 2>&1 ||
  { cat /tmp/apt.log >&2; fail "apt-get install $deb failed"; }
installed_packages >/tmp/after
pulled=$(comm -13 /tmp/before /tmp/after | grep -vx ckpt || true)
dev_packages=$(grep -- '-dev$' <<<"$pulled" || true)
[[ -z $dev_packages ]] || fail "installing ckpt pulled development packages: $(one_line "$dev_packages")"
static_files=$(dpkg -L ckpt | grep -E 'libckpt\.a$|ckptStaticTargets' || true)
[[ -z $static_files ]] || fail "the package holds the static library's files: $(one_line "$static_files")"
echo "install: apt installed ckpt $(dpkg-query -W -f '${Version}' ckpt) with run-time libraries only: $(one_line "$pulled")"
