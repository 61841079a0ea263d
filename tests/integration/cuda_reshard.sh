#!/bin/bash
# Device shards resharded across ranks (tests/integration/cuda_scenario.cc): 3 ranks save column slabs, then 2 and
# then 4 ranks load them, each load checking every element and, if TRANSPORT is given, that it used TRANSPORT.
# With `peer-dies`, a 3-rank load loses its last rank right before the exchange instead: the survivors must fail
# cleanly (neither killed nor hung). A skip (exit 77: no device, or too few for NCCL) passes through.
# Usage: cuda_reshard.sh LAUNCH SCENARIO DIR [TRANSPORT [peer-dies]]
set -euo pipefail
launch=$1 scenario=$2 dir=$3 transport=${4:-} variant=${5:-}
rm -rf "$dir"
"$launch" -n 3 -- "$scenario" save "$dir"
if [ "$variant" != peer-dies ]; then
  for ranks in 2 4; do
    "$launch" -n "$ranks" -- "$scenario" load "$dir" $transport
  done
  exit 0
fi
rc=0
out=$(CKPT_FAULT_EXIT_BEFORE_EXCHANGE=2 CKPT_TIMEOUT_MS=30000 "$launch" -n 3 --grace 60 --timeout 120 -- \
      "$scenario" load-expect-peer-failure "$dir" "$transport" 2>&1) || rc=$?
echo "$out"
[ "$rc" = 77 ] && exit 77
# The victim exits with 99; the launcher reports it. Every survivor must have failed cleanly, not been killed.
[ "$rc" = 99 ] || { echo "expected the launcher to report the victim's exit code 99, got $rc" >&2; exit 1; }
if echo "$out" | grep -q "FAILED\|killed by signal"; then echo "a surviving rank failed or hung" >&2; exit 1; fi
echo "$out" | grep -q "peer died in the exchange" || { echo "rank 0 did not report the failure" >&2; exit 1; }
