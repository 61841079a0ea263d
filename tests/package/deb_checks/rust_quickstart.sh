#!/usr/bin/env bash
# Runs as user ckpt inside the clean root (tests/package/deb_in_clean_root.sh), in rust/ holding the binding's crate
# (ckpt/) and one around its README's example (quickstart/): builds it with Debian's cargo, offline, against the
# installed library, which the binding's build.rs finds through pkg-config, then saves and loads on 2 ranks.
set -euo pipefail
fail() { echo "rust: $*" >&2; exit 1; }
cd rust/quickstart
checkpoint=/tmp/run/step-7  # the README's

cargo build --offline >build.log 2>&1 || { cat build.log >&2; fail "cargo build failed ($(rustc --version))"; }
# build.rs warns where it finds no libckpt.so; the linker's default path would hide that from the link itself.
if grep -q 'libckpt.so not found' build.log; then
  cat build.log >&2
  fail "build.rs did not find the installed library"
fi
ckpt-launch -n 2 -- target/debug/quickstart || fail "the README's example failed on 2 ranks"
ckpt verify "$checkpoint" >verify.log 2>&1 || { cat verify.log >&2; fail "ckpt verify $checkpoint failed"; }
echo "rust: README's example built by $(rustc --version | cut -d' ' -f1-2) offline, saved and loaded on 2 ranks," \
  "verified"
