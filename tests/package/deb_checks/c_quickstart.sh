#!/usr/bin/env bash
# Runs as user ckpt inside the clean root (tests/package/deb_in_clean_root.sh), in c/ holding README.md's C quick
# start: builds it as the README says, saves on 2 ranks under ckpt-launch, and reads the checkpoint back with the
# ckpt tool.
set -euo pipefail
fail() { echo "c: $*" >&2; exit 1; }
cd c
checkpoint=/tmp/ckpt/step-1

# shellcheck disable=SC2046  # unquoted: the README's command as a user types it
cc quickstart.c $(pkg-config --cflags --libs ckpt) || fail "the README's quick start does not build with pkg-config"
ckpt-launch -n 2 -- ./a.out "$checkpoint" || fail "the quick start failed on 2 ranks"
ckpt verify "$checkpoint" >verify.log 2>&1 || { cat verify.log >&2; fail "ckpt verify $checkpoint failed"; }
ckpt ls "$checkpoint" >ls.log 2>&1 || { cat ls.log >&2; fail "ckpt ls $checkpoint failed"; }
grep -q 'layer0\.weight' ls.log || { cat ls.log >&2; fail "ckpt ls does not list layer0.weight"; }
echo "c: README's quick start built with pkg-config, saved on 2 ranks, passed ckpt verify and ckpt ls"
