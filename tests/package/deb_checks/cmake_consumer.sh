#!/usr/bin/env bash
# Runs as user ckpt inside the clean root (tests/package/deb_in_clean_root.sh): builds tests/install/consumer
# (cmake-consumer/), which finds the installed shared library with find_package(ckpt), into NAME-build, and runs it.
# Usage: cmake_consumer.sh NAME   (NAME prefixes the messages: which situation of the root this checks)
set -euo pipefail
name=$1
fail() { echo "$name: $*" >&2; exit 1; }

cmake -S cmake-consumer -B "$name-build" >"$name-configure.log" 2>&1 ||
  { cat "$name-configure.log" >&2; fail "find_package(ckpt) failed in a C and C++ project"; }
cmake --build "$name-build" >"$name-build.log" 2>&1 ||
  { cat "$name-build.log" >&2; fail "the consumer does not build"; }
linked=$("$name-build/consumer") || fail "the consumer failed"
echo "$name: find_package(ckpt) in a C and C++ project, built and run: $linked"
