#!/usr/bin/env bash
# A bench/scale simulation that fails (here its spools find $TMPDIR full) exits naming the failure and leaves nothing
# behind: its folder, gigabytes at scale, is removed however it ends. Root: $TMPDIR is a 1 MiB tmpfs mounted for it.
set -uo pipefail
scale=$1 dir=$2
rm -rf "$dir" && mkdir -p "$dir/small" || exit 1
mount -t tmpfs -o size=1m tmpfs "$dir/small" 2>/dev/null || { echo "cannot mount a tmpfs (needs root): not run"; exit 77; }
trap 'umount "$dir/small"' EXIT
err=$(TMPDIR="$dir/small" "$scale" --ranks 128 --workers 2 --limit-s 60 2>&1 >/dev/null)
code=$?
echo "$err"
[ "$code" -ne 0 ] || { echo "the simulation passed on a full disk"; exit 1; }
grep -q "No space left on device" <<<"$err" || { echo "the failure does not name the full disk"; exit 1; }
left=$(ls -A "$dir/small")
[ -z "$left" ] || { echo "left behind: $left"; exit 1; }
echo "bench/scale: a simulation that failed left nothing behind"
