# Sourced by the S3 test scripts: the server of tools/s3_server.sh (its env file: endpoint, keys, region, bucket)
# exported for ckpt, and s3_request, which asks the server directly with curl's own SigV4 signing, to check what
# ckpt left there without going through ckpt.
# Usage: source s3_env.sh SERVER_DIR
S3_SERVER_SCRIPT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/tools/s3_server.sh
if [ ! -f "$1/env" ]; then
  echo "FAIL: no S3 server at $1 (the ctest fixture s3_server starts it: tools/s3_server.sh start $1)" >&2
  exit 1
fi
set -a
source "$1/env"
set +a

# s3_request METHOD PATH [CURL ARGS...]: PATH with its query ("/bucket?uploads"); prints the body, fails on an HTTP
# error. curl 7.88's --aws-sigv4 signs no x-amz-content-sha256, which radosgw requires: the header is sent, and so
# signed.
s3_request() {
  local method=$1 path=$2
  shift 2
  curl -sS --fail-with-body -X "$method" --aws-sigv4 "aws:amz:$AWS_REGION:s3" \
    --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$@" \
    "$AWS_ENDPOINT_URL$path"
}

# s3_query_prefix URL: the key prefix of an s3:// URL of the test bucket, as a query value. curl 7.88 signs the query
# as written, so it must already be canonical: parameters sorted, '/' encoded.
s3_query_prefix() {
  local prefix=${1#s3://$CKPT_S3_TEST_BUCKET/}
  echo "${prefix//\//%2F}"
}

# s3_keys PREFIX: how many objects lie under PREFIX (an s3:// URL of the test bucket); fails if the listing does.
s3_keys() {
  local listing
  listing=$(s3_request GET "/$CKPT_S3_TEST_BUCKET?list-type=2&prefix=$(s3_query_prefix "$1")") || return 1
  { grep -o "<Key>" <<<"$listing" || true; } | wc -l
}

# s3_open_uploads PREFIX: how many multipart uploads are open under PREFIX; fails if the listing does.
s3_open_uploads() {
  local listing
  listing=$(s3_request GET "/$CKPT_S3_TEST_BUCKET?prefix=$(s3_query_prefix "$1")&uploads=") || return 1
  { grep -o "<UploadId>" <<<"$listing" || true; } | wc -l
}
