#!/usr/bin/env bash
# bench/scale's simulation shared among worker processes (bench/scale_spool.h: RunStep) gives the figures that one
# process gives: every count, byte ratio, round count and link count of 128 and 256 ranks, both layouts. Times, peak
# memory and what the busiest rank decodes depend on which rank was timed the slowest, so they are left out.
set -euo pipefail
scale=$1
deterministic() {
  "$scale" --ranks 128,256 --workers "$1" --limit-s 60 |
    grep -vE '^#|_plan_s|_decode_s|rss_mib|tensors_decoded|manifest_read_mib|growth_exponent'
}
one=$(deterministic 1)
three=$(deterministic 3)
[ "$(grep -c '^scale_' <<<"$one")" -ge 50 ] || { echo "too few figures from one process:"; echo "$one"; exit 1; }
grep -q '^scale_links_per_rank_max_plain_256 ' <<<"$one" || { echo "no link figure:"; echo "$one"; exit 1; }
if [ "$one" != "$three" ]; then
  echo "three workers disagree with one process:"
  diff <(echo "$one") <(echo "$three")
  exit 1
fi
echo "bench/scale: $(grep -c '^scale_' <<<"$one") figures agree between one process and three workers"
