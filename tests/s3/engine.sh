#!/usr/bin/env bash
# Multi-rank saves and loads on S3, against the real server of the ctest fixture s3_server (tools/s3_server.sh).
# Usage: engine.sh PART SERVER_DIR BUILD_DIR
#   save-load        3 ranks save, `ckpt ls/verify/cat` read it, 2 ranks load it resharded (every element checked);
#                    a second save to the same path is refused and leaves the first intact
#   sections         4 ranks save 4,608 chunks, a manifest in sections (format 4); 3 ranks load it resharded, each
#                    reading with ranged GETs only the sections it needs (every element checked)
#   export-import    `ckpt export` from S3 to S3 (one file, and Hugging Face shards with an index) and to a local file;
#                    `ckpt import` of each back, from S3 to S3 and to a local directory, equal to the original
#                    tensor by tensor (`ckpt diff`)
#   wrong-credentials
#                    a save with a wrong secret key fails on every rank at once, naming the access key; nothing is
#                    written
#   first-call-errors
#                    a save to a missing bucket, to an endpoint nobody listens on, and without credentials each fails
#                    on every rank with its own message, and a load of a missing checkpoint names the MANIFEST
#   gateway-killed   the gateway is killed while the ranks' multipart uploads are in flight: every rank's save fails
#                    with an error naming the S3 endpoint, nothing is committed, and the next save to the same path
#                    commits and loads. It kills the gateway of a server of its own (in SERVER_DIR-gateway-killed),
#                    not the fixture's, which other tests use meanwhile
#   rank-killed      a rank is killed (SIGKILL) while its uploads are in flight: every other rank's save fails,
#                    nothing is committed, and the next save to the same path commits and loads
#   memory-tier      a manager on S3 with the memory tier (examples/memory_tier.c): 2 ranks save every step into
#                    the node's agent and are killed after step 7; the agent persists steps 5 and 7 to S3; 3 ranks
#                    resume at step 7 from memory, train to 12 and end, and the agent persists step 10 to S3
set -euo pipefail
part=$1 server=$2 build=$3
if [ "$part" = gateway-killed ]; then
  private=$server-gateway-killed
  bash "$(dirname "$0")/../../tools/s3_server.sh" start "$private"
  trap 'bash "$(dirname "$0")/../../tools/s3_server.sh" stop "$private"' EXIT
  server=$private
fi
source "$(dirname "$0")/s3_env.sh" "$server"

launch=("$build/tools/ckpt-launch" --timeout 120 --grace 60)
hosts=$build/tests/ckpt_scenario_hosts
bench=$build/bench/ckpt_bench
cli=$build/tools/ckpt
work=$(mktemp -d /tmp/ckpt-s3-engine.XXXXXX)
trap 'rm -rf "$work"; [ -z "${private:-}" ] || bash "$S3_SERVER_SCRIPT" stop "$private"' EXIT
run_prefix=s3://$CKPT_S3_TEST_BUCKET/engine-$part-$$-$RANDOM
export CKPT_ARENA_BYTES=$((256 << 20))

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# ranks N LOG_PREFIX PROGRAM ARGS...: runs N ranks, each one's stderr and stdout in LOG_PREFIX-<rank>.log; returns
# the launcher's status.
ranks() {
  local n=$1 log=$2
  shift 2
  "${launch[@]}" -n "$n" -- sh -c 'exec "$@" >"$0-$RANK.log" 2>&1' "$log" "$@"
}

# every_rank_says N LOG_PREFIX TEXT: each rank's log holds TEXT.
every_rank_says() {
  local n=$1 log=$2 text=$3 r
  for ((r = 0; r < n; r++)); do
    grep -qF -- "$text" "$log-$r.log" || { cat "$log-$r.log" >&2; fail "rank $r did not report '$text'"; }
  done
}

# committed URL: whether URL/MANIFEST exists (the commit's mark on S3).
committed() { "$cli" ls "$1" >/dev/null 2>&1; }

# wait_for_upload PREFIX: returns once a multipart upload under PREFIX is open (the ranks are mid-upload).
wait_for_upload() {
  local i open
  for ((i = 0; i < 400; i++)); do
    open=$(s3_open_uploads "$1") || fail "cannot list the uploads under $1"
    [ "$open" -eq 0 ] || return 0
    sleep 0.05
  done
  fail "no multipart upload started under $1 within 20 s"
}

case $part in
  save-load)
    path=$run_prefix/step-1
    ranks 3 "$work/save" "$hosts" save-hosts "$path" || { cat "$work"/save-*.log >&2; fail "the save on 3 ranks"; }
    "$cli" ls "$path" | tee "$work/ls.txt"
    grep -q "big" "$work/ls.txt" || fail "ckpt ls does not list the tensor 'big'"
    "$cli" verify "$path" || fail "ckpt verify of the saved checkpoint"
    "$cli" cat "$path" w >/dev/null || fail "ckpt cat of tensor 'w'"
    ranks 2 "$work/load" "$hosts" load-hosts "$path" || { cat "$work"/load-*.log >&2; fail "the load on 2 ranks"; }
    if ranks 3 "$work/again" "$hosts" save-hosts "$path"; then fail "a second save to $path was not refused"; fi
    every_rank_says 3 "$work/again" "already exists"
    "$cli" verify "$path" || fail "the first checkpoint no longer verifies after the refused save"
    echo "PASS: saved on 3 ranks, listed, verified, loaded resharded on 2; a second save was refused"
    ;;
  sections)
    path=$run_prefix/step-1
    reads=$build/tests/ckpt_scenario_reads
    ranks 4 "$work/save" "$reads" save-sections "$path" || { cat "$work"/save-*.log >&2; fail "the save on 4 ranks"; }
    ranks 3 "$work/load" "$reads" load-sections "$path" || { cat "$work"/load-*.log >&2; fail "the load on 3 ranks"; }
    echo "PASS: 4,608 chunks saved on 4 ranks in a manifest of format 4, loaded resharded on 3"
    ;;
  export-import)
    path=$run_prefix/step-1
    ranks 3 "$work/save" "$hosts" save-hosts "$path" || { cat "$work"/save-*.log >&2; fail "the save on 3 ranks"; }
    "$cli" export "$path" "$run_prefix/exported/model.safetensors" || fail "export from S3 to an S3 object"
    "$cli" export --max-shard-size=2MB "$path" "$run_prefix/sharded" || fail "export from S3 to S3 shards"
    "$cli" export "$path" "$work/model.safetensors" || fail "export from S3 to a local file"
    "$cli" import "$run_prefix/exported/model.safetensors" "$run_prefix/imported-file" || fail "import of an S3 file"
    "$cli" import "$run_prefix/sharded" "$work/imported-shards" || fail "import of S3 shards into a directory"
    "$cli" import "$work/model.safetensors" "$run_prefix/imported-local" || fail "import of a local file into S3"
    for imported in "$run_prefix/imported-file" "$work/imported-shards" "$run_prefix/imported-local"; do
      "$cli" verify "$imported" || fail "$imported does not verify"
      "$cli" diff "$path" "$imported" | grep -q "the tensors are equal" || fail "$imported differs from $path"
    done
    if "$cli" export "$path" "$run_prefix/exported/model.safetensors"; then fail "an export replaced an object"; fi
    echo "PASS: exported from S3 to S3 (a file, shards) and to a local file; imported each back, equal to the original"
    ;;
  wrong-credentials)
    path=$run_prefix/step-1
    if AWS_SECRET_ACCESS_KEY=wrong-secret ranks 2 "$work/save" "$hosts" save-hosts "$path"; then
      fail "a save with a wrong secret key succeeded"
    fi
    every_rank_says 2 "$work/save" "$AWS_ACCESS_KEY_ID"
    every_rank_says 2 "$work/save" "403"
    keys=$(s3_keys "$path/") || fail "cannot list the objects under $path"
    [ "$keys" -eq 0 ] || fail "$keys objects were written under $path"
    echo "PASS: a wrong secret key fails every rank's save, naming the key and HTTP 403; nothing written"
    ;;
  first-call-errors)
    if ranks 2 "$work/bucket" "$hosts" save-hosts "s3://no-such-bucket-$$/step-1"; then
      fail "a save to a missing bucket succeeded"
    fi
    every_rank_says 2 "$work/bucket" "bucket 'no-such-bucket-$$' does not exist at $AWS_ENDPOINT_URL"
    if AWS_ENDPOINT_URL=http://127.0.0.1:1 AWS_MAX_ATTEMPTS=2 ranks 2 "$work/endpoint" "$hosts" save-hosts "$run_prefix/a"
    then
      fail "a save to an unreachable endpoint succeeded"
    fi
    every_rank_says 2 "$work/endpoint" "cannot reach the S3 endpoint http://127.0.0.1:1 after 2 attempts"
    if env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_PROFILE -u AWS_SHARED_CREDENTIALS_FILE -u AWS_CONFIG_FILE \
      HOME="$work" \
      "${launch[@]}" -n 2 -- sh -c 'exec "$@" >"$0-$RANK.log" 2>&1' "$work/credentials" "$hosts" save-hosts \
      "$run_prefix/b"; then
      fail "a save without credentials succeeded"
    fi
    every_rank_says 2 "$work/credentials" "no S3 credentials"
    if "$cli" verify "$run_prefix/never-saved" 2>"$work/verify.log"; then fail "a missing checkpoint verified"; fi
    grep -qF "no checkpoint at $run_prefix/never-saved (MANIFEST missing)" "$work/verify.log" ||
      { cat "$work/verify.log" >&2; fail "ckpt verify of a missing checkpoint does not say so"; }
    echo "PASS: a missing bucket, an unreachable endpoint, missing credentials and a missing checkpoint each fail" \
      "at once with their own message"
    ;;
  gateway-killed | rank-killed)
    path=$run_prefix/step-1
    export AWS_MAX_ATTEMPTS=3 CKPT_TIMEOUT_MS=20000
    ranks 2 "$work/save" "$bench" save --dir "$path" --mib 768 --tensors 4 &
    saving=$!
    wait_for_upload "$path"
    if [ "$part" = gateway-killed ]; then
      bash "$S3_SERVER_SCRIPT" stop-gateway "$server"
    else
      victim=$(pgrep -n -f -- "^$bench save --dir $path") || fail "no rank process found"
      kill -9 "$victim"
    fi
    if wait "$saving"; then fail "the save succeeded although its $part"; fi
    if [ "$part" = gateway-killed ]; then
      every_rank_says 2 "$work/save" "$AWS_ENDPOINT_URL"
      bash "$S3_SERVER_SCRIPT" start-gateway "$server"
      # Each rank aborts what it had open, or rank 0 removes the save's objects; neither can while the gateway is
      # down, so what remains is for the next save's cleanup: only the commit's absence is asserted here.
    else
      grep -l "rank" "$work"/save-*.log >/dev/null || fail "no surviving rank reported the failure"
    fi
    if committed "$path"; then fail "$path was committed although the save failed"; fi
    ranks 2 "$work/next" "$hosts" save-hosts "$path" || { cat "$work"/next-*.log >&2; fail "the next save"; }
    ranks 2 "$work/load" "$hosts" load-hosts "$path" || { cat "$work"/load-*.log >&2; fail "loading the next save"; }
    echo "PASS: $part mid-upload: every rank's save failed, nothing committed; the next save committed and loads"
    ;;
  memory-tier)
    root=$run_prefix/memory-tier
    export CKPT_JOB_ID=s3-memory-tier-$$ CKPT_AGENT_SHM_ROOT=/dev/shm/ckpt-s3-memory-tier-$$ CKPT_TIMEOUT_MS=60000
    agent="ckpt-agent --job-id $CKPT_JOB_ID "
    trap 'pkill -KILL -f -- "$agent" || true; rm -rf "$work" "$CKPT_AGENT_SHM_ROOT"' EXIT
    mkdir -p "$CKPT_AGENT_SHM_ROOT"
    example=$build/examples/memory_tier
    if "${launch[@]}" -n 2 -- "$example" "$root" 7 crash; then fail "the ranks meant to crash at step 7 did not"; fi
    for ((i = 0; i < 200; i++)); do committed "$root/step-000000000007" && break; sleep 0.1; done
    "$cli" verify "$root/step-000000000005" || fail "the agent did not persist step 5 to S3"
    "$cli" verify "$root/step-000000000007" || fail "the agent did not persist step 7 to S3 after the crash"
    out=$("${launch[@]}" -n 3 -- "$example" "$root" 12) || fail "resuming on 3 ranks"
    grep -q "resumed at step 7 on 3 ranks" <<<"$out" || fail "the ranks did not resume at step 7: $out"
    for ((i = 0; i < 200; i++)); do pgrep -f -- "$agent" >/dev/null || break; sleep 0.1; done
    "$cli" verify "$root/step-000000000010" || fail "the agent did not persist step 10 to S3"
    if committed "$root/step-000000000012"; then fail "step 12, saved to memory only, reached S3"; fi
    echo "PASS: the memory tier persisted steps 5, 7 (after the crash) and 10 to S3; 3 ranks resumed at step 7"
    ;;
  *)
    fail "unknown part '$part'"
    ;;
esac
