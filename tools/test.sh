#!/usr/bin/env bash
# Builds ckpt into build/ (or $CKPT_BUILD_DIR) and runs every test; exits non-zero if any fails.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CKPT_BUILD_DIR:-$repo/build}
build_type=${CKPT_BUILD_TYPE:-Release}

bash "$repo/tools/deps.sh"
python=$(bash "$repo/tools/python_env.sh" "$build/venv")
generator=()
if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then
  generator=(-G Ninja)
fi
cmake -S "$repo" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE="$build_type" -DPython3_EXECUTABLE="$python"
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" --output-on-failure -j2
