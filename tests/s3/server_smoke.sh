#!/usr/bin/env bash
# The S3 server of the tests (tools/s3_server.sh) does what ckpt's S3 backend relies on: an object written reads back
# whole and by range, a write with If-None-Match: * fails with 412 once the key exists, and a wrong secret is refused.
#   server_smoke.sh ENV_FILE     ENV_FILE: the env file that `tools/s3_server.sh start` wrote
set -euo pipefail

env_file=$1
if [ ! -f "$env_file" ] && ! command -v radosgw >/dev/null 2>&1; then
  echo "server_smoke.sh: skipped: radosgw is not installed (tools/deps.sh installs it)" >&2
  exit 77
fi
if [ ! -f "$env_file" ]; then
  echo "server_smoke.sh: no $env_file: the s3_server_start test did not run or failed" >&2
  exit 1
fi
# shellcheck source=/dev/null
source "$env_file"
endpoint=$AWS_ENDPOINT_URL bucket=$CKPT_S3_TEST_BUCKET
work=$(mktemp -d)
prefix="smoke-$$-$RANDOM"
trap 'rm -rf "$work"' EXIT
failures=0

# curl 7.88's --aws-sigv4 signs no x-amz-content-sha256, which radosgw requires: the header is sent, and so signed.
s3() {
  curl -s --max-time 60 --aws-sigv4 "aws:amz:$AWS_REGION:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$@"
}

# expect WHAT EXPECTED ACTUAL: records a failure when they differ.
expect() {
  if [ "$2" = "$3" ]; then
    echo "ok: $1"
  else
    echo "FAILED: $1: expected $2, got $3" >&2
    failures=$((failures + 1))
  fi
}

head -c $((5 << 20)) /dev/urandom >"$work/object"
expect "PUT of a 5 MiB object" 200 "$(s3 -o /dev/null -w '%{http_code}' -T "$work/object" "$endpoint/$bucket/$prefix/a")"
expect "GET answers 200" 200 "$(s3 -o "$work/read" -w '%{http_code}' "$endpoint/$bucket/$prefix/a")"
expect "GET returns the bytes written" same "$(cmp -s "$work/object" "$work/read" && echo same || echo different)"

expect "ranged GET answers 206" 206 \
  "$(s3 -o "$work/range" -w '%{http_code}' -H "Range: bytes=4194300-4194399" "$endpoint/$bucket/$prefix/a")"
dd if="$work/object" of="$work/range-expected" iflag=skip_bytes,count_bytes skip=4194300 count=100 status=none
expect "ranged GET returns those bytes, across a 4 MiB stripe" same \
  "$(cmp -s "$work/range-expected" "$work/range" && echo same || echo different)"

echo first >"$work/small"
expect "PUT with If-None-Match: * of a new key" 200 \
  "$(s3 -o /dev/null -w '%{http_code}' -H 'If-None-Match: *' -T "$work/small" "$endpoint/$bucket/$prefix/b")"
echo second >"$work/small"
expect "PUT with If-None-Match: * of an existing key" 412 \
  "$(s3 -o "$work/error" -w '%{http_code}' -H 'If-None-Match: *' -T "$work/small" "$endpoint/$bucket/$prefix/b")"
expect "its error code" PreconditionFailed "$(grep -o '<Code>[^<]*' "$work/error" | cut -d'>' -f2)"
expect "the existing object is untouched" first "$(s3 "$endpoint/$bucket/$prefix/b")"

expect "a wrong secret is refused" 403 "$(curl -s -o /dev/null -w '%{http_code}' --aws-sigv4 "aws:amz:$AWS_REGION:s3" \
  --user "$AWS_ACCESS_KEY_ID:wrong" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$endpoint/$bucket/$prefix/a")"

for key in a b; do
  expect "DELETE $key" 204 "$(s3 -o /dev/null -w '%{http_code}' -X DELETE "$endpoint/$bucket/$prefix/$key")"
done
[ "$failures" -eq 0 ] || { echo "server_smoke.sh: $failures check(s) failed" >&2; exit 1; }
