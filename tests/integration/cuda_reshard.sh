#!/bin/bash
# Device shards resharded across ranks (tests/integration/cuda_scenario.cc): 3 ranks save column slabs, then 2 and
# then 4 ranks load them, each load checking every element and, if TRANSPORT is given, that it used TRANSPORT.
# A skip (exit 77: no device, or too few for NCCL) passes through.
# Usage: cuda_reshard.sh LAUNCH SCENARIO DIR [TRANSPORT]
set -euo pipefail
launch=$1 scenario=$2 dir=$3 transport=${4:-}
rm -rf "$dir"
"$launch" -n 3 -- "$scenario" save "$dir"
for ranks in 2 4; do
  "$launch" -n "$ranks" -- "$scenario" load "$dir" $transport
done
