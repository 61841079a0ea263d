#!/usr/bin/env bash
# Extracts the first ```c block of README.md, builds it against the library, and runs it on 2 ranks.
set -euo pipefail
readme=$1 library=$2 launch=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
awk '/^```c$/ {inside=1; next} /^```$/ && inside {exit} inside' "$readme" > "$work/quickstart.c"
[ -s "$work/quickstart.c" ] || { echo "README.md has no \`\`\`c block" >&2; exit 1; }
include_dir=$(cd "$(dirname "$readme")/include" && pwd)
cc -std=c99 -pedantic -Wall -Werror -I"$include_dir" -o "$work/quickstart" "$work/quickstart.c" \
   -L"$(dirname "$library")" -lckpt -Wl,-rpath,"$(dirname "$library")"
"$launch" -n 2 --timeout 60 -- "$work/quickstart" "$work/ckpt/step-1"
test -f "$work/ckpt/step-1/MANIFEST"
echo "README example: built and ran on 2 ranks"
