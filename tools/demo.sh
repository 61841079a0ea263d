#!/usr/bin/env bash
# The resharding demo: 4 ranks save a tensor-parallel x data-parallel (2 x 2) layout, then 2 ranks and 3 ranks
# load it with different splits, each rank checking every element it receives.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CKPT_BUILD_DIR:-$repo/build}

bash "$repo/tools/deps.sh"
generator=()
if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then
  generator=(-G Ninja)
fi
cmake -S "$repo" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j "$(nproc)" --target ckpt-launch ckpt_cli example_reshard

launch=("$build/tools/ckpt-launch" --timeout 120)
reshard=$build/examples/reshard
workdir=$(mktemp -d /tmp/ckpt-demo.XXXXXX)
trap 'if [ $? -eq 0 ]; then rm -rf "$workdir"; else echo "demo: FAILED; files kept in $workdir" >&2; fi' EXIT
checkpoint=$workdir/step-300

echo
echo "== save on 4 ranks (TP=2 x DP=2)"
"${launch[@]}" -n 4 -- "$reshard" save "$checkpoint"
echo
echo "== what was written"
"$build/tools/ckpt" ls "$checkpoint"
"$build/tools/ckpt" verify "$checkpoint"
for ranks in 2 3; do
  echo
  echo "== load on $ranks ranks"
  "${launch[@]}" -n "$ranks" -- "$reshard" load "$checkpoint"
done
echo
echo "PASS: saved on 4 ranks (TP=2 x DP=2); loaded on 2 and on 3 ranks with new splits, every element verified"
