#!/usr/bin/env bash
# The shell and Python snippets of README.md's "Object storage (S3)" section, run as a user would paste them, against
# the real server of the fixture s3_server: its bucket replaces "ckpts", and the fixture's settings replace the
# snippet's `export` line of placeholders.
# Usage: readme_snippets.sh README SERVER_DIR BUILD_DIR PYTHON
set -euo pipefail
readme=$1 server=$2 build=$(cd "$3" && pwd) python=$4
source "$(dirname "$0")/s3_env.sh" "$server"
work=$(mktemp -d /tmp/ckpt-s3-readme.XXXXXX)
trap 'rm -rf "$work"' EXIT
prefix=$CKPT_S3_TEST_BUCKET/readme-$$-$RANDOM

# block LANGUAGE: the first ```LANGUAGE block of the section.
block() {
  awk -v fence='```'"$1" '/^## Object storage \(S3\)/ {inside = 1; next} inside && /^## / {exit}
    inside && $0 == fence {copy = 1; next} copy && /^```$/ {exit} copy' "$readme"
}
block sh | grep -v '^export ' | sed "s|s3://ckpts/|s3://$prefix/|g; s|build/|$build/|g" > "$work/snippet.sh"
block python | sed "s|s3://ckpts/|s3://$prefix/|g" > "$work/snippet.py"
[ -s "$work/snippet.sh" ] && [ -s "$work/snippet.py" ] || { echo "FAIL: the S3 section lost its snippets" >&2; exit 1; }
cat "$work/snippet.sh"
(cd "$work" && bash -euo pipefail snippet.sh)
CKPT_LIB=$build/runtime/libckpt.so PYTHONPATH=$(dirname "$readme")/bindings/python/src "$python" "$work/snippet.py"
"$build/tools/ckpt" verify "s3://$prefix/run-7/step-1"
echo "PASS: the README's S3 snippets ran against the server"
