#!/usr/bin/env bash
# Runs a command with the GPU simulator's libcudart.so.13 and libnccl.so.2 found before any real CUDA:
#   run_under_simgpu.sh SIMGPU_DIR [--no-skips] COMMAND [ARGS...]
# --no-skips: COMMAND is a GoogleTest binary; fail when any test skipped or none ran, since under the simulator a
# device always exists and a skip means the simulator was not picked up.
set -euo pipefail
simgpu_dir=$1
shift
no_skips=0
if [ "${1:-}" = "--no-skips" ]; then
  no_skips=1
  shift
fi
for library in libcudart.so.13 libnccl.so.2; do
  [ -e "$simgpu_dir/$library" ] || { echo "run_under_simgpu: $simgpu_dir/$library is missing" >&2; exit 1; }
done
export LD_LIBRARY_PATH="$simgpu_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ "$no_skips" = 0 ]; then
  exec "$@"
fi
log=$(mktemp /tmp/simgpu-run-XXXXXX)
trap 'rm -f "$log"' EXIT
rc=0
"$@" 2>&1 | tee "$log" || rc=$?
[ "$rc" = 0 ] || exit "$rc"
if grep -q '^\[  SKIPPED \]' "$log"; then
  echo "run_under_simgpu: tests skipped under the simulator (see above)" >&2
  exit 1
fi
if ! grep -Eq '^\[  PASSED  \] [1-9][0-9]* test' "$log"; then
  echo "run_under_simgpu: no test ran" >&2
  exit 1
fi
