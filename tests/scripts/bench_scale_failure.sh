#!/usr/bin/env bash
# A bench/scale simulation that fails (here its spools find /tmp full) exits naming the failure and leaves nothing in
# /tmp: its folder, gigabytes at scale, is removed however it ends. Root: /tmp is a 1 MiB tmpfs in a mount namespace
# of this test's own.
set -uo pipefail
scale=$1
if [ "${2:-}" != in-namespace ]; then
  unshare --mount --propagation private true 2>/dev/null || { echo "cannot make a mount namespace (needs root): not run"; exit 77; }
  exec unshare --mount --propagation private "$0" "$scale" in-namespace
fi
mount -t tmpfs -o size=1m tmpfs /tmp || exit 1
err=$("$scale" --ranks 128 --workers 2 --limit-s 60 2>&1 >/dev/null)
code=$?
echo "$err"
[ "$code" -ne 0 ] || { echo "the simulation passed on a full /tmp"; exit 1; }
grep -q "No space left on device" <<<"$err" || { echo "the failure does not name the full disk"; exit 1; }
left=$(ls -A /tmp)
[ -z "$left" ] || { echo "left in /tmp: $left"; exit 1; }
echo "bench/scale: a simulation that failed left /tmp empty"
