#!/usr/bin/env bash
# Runs as user ckpt inside the clean root (tests/package/deb_in_clean_root.sh), in go/ holding the binding's module
# (ckpt/) and a program around its README's saveRows (quickstart/): builds it with Debian's go, cgo finding the
# installed library through pkg-config, with no module proxy, then saves on 2 ranks.
set -euo pipefail
fail() { echo "go: $*" >&2; exit 1; }
cd go/quickstart
checkpoint=/ckpt/step-100  # the README's
export GOFLAGS=-mod=mod GOPROXY=off

go build -o quickstart . >build.log 2>&1 || { cat build.log >&2; fail "go build failed ($(go version))"; }
ckpt-launch -n 2 -- ./quickstart || fail "the README's saveRows failed on 2 ranks"
ckpt verify "$checkpoint" >verify.log 2>&1 || { cat verify.log >&2; fail "ckpt verify $checkpoint failed"; }
echo "go: README's saveRows built by $(go version | cut -d' ' -f3) through pkg-config, saved on 2 ranks, verified"
