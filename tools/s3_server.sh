#!/usr/bin/env bash
# A real S3 server for ckpt's tests and benchmarks: a one-host Ceph Pacific cluster (one monitor, one OSD, radosgw
# with the beast frontend) whose every file lives in one directory, so that several can run at once.
#
#   tools/s3_server.sh start DIR [--address ADDR] [--port PORT] [--netns NAME]
#                                    a fresh cluster in DIR (a stale one there is killed and wiped first); returns
#                                    once the gateway answers HTTP, with the test user and bucket made and DIR/env
#                                    written (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION,
#                                    CKPT_S3_TEST_BUCKET); ADDR defaults to 127.0.0.1, PORT to a free one; with
#                                    --netns every daemon runs in that existing network namespace, bound to ADDR
#   tools/s3_server.sh stop DIR      kills every daemon of DIR and removes its data (DIR/log stays, for post-mortems)
#   tools/s3_server.sh stop-gateway DIR
#                                    kills the radosgw alone with SIGKILL, as a crash would (mid-upload tests)
#   tools/s3_server.sh start-gateway DIR
#                                    starts the radosgw again and returns once it answers
#
# Choices, for a test server on a small machine:
# - The OSD keeps its objects in memory (memstore): no disk format to make, nothing to sync, and the fastest start.
#   Its capacity is CKPT_S3_MEMSTORE_BYTES (default 4 GiB); the data of objects deleted or overwritten waits for
#   radosgw's garbage collector (5-10 s here) before its memory is free again. A full OSD does not fail writes:
#   radosgw stops reading the request body and the client waits forever (seen with curl: 0 bytes/s, no answer).
# - No cephx (auth none), no manager daemon (radosgw needs none), pools of one replica and 8 placement groups.
# - Daemons are stopped with SIGKILL: the data is thrown away anyway, and memstore would otherwise dump every
#   object to disk on a clean shutdown.
set -euo pipefail

readonly ACCESS_KEY=CKPTTESTACCESSKEY000
readonly SECRET_KEY=ckpt-test-secret-key-0000000000000000000
readonly REGION=us-east-1
readonly BUCKET=ckpt-test
readonly START_TIMEOUT_S=${CKPT_S3_START_TIMEOUT:-120}

die() { echo "s3_server.sh: $*" >&2; exit 1; }

usage() {
  sed -n '4,15p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# Prints the tail of a daemon's log to stderr and fails: a failed start says why without a second look.
fail_with_log() {
  local log=$1; shift
  echo "s3_server.sh: $*" >&2
  if [ -s "$log" ]; then
    echo "--- last lines of $log ---" >&2
    tail -n 40 "$log" >&2
  fi
  exit 1
}

# Runs a command where the cluster's daemons run: in its network namespace, if it has one.
in_ns() {
  if [ -n "${NETNS:-}" ]; then
    ip netns exec "$NETNS" "$@"
  else
    "$@"
  fi
}

# A TCP port nobody listens on where the cluster runs; random, so that clusters started at once rarely pick the same.
free_port() {
  local port listening
  listening=$(in_ns ss -Hltn | awk '{print $4}' | sed 's/.*://')
  for _ in $(seq 100); do
    port=$((20000 + RANDOM % 40000))
    grep -qx "$port" <<<"$listening" || { echo "$port"; return 0; }
  done
  die "no free port found"
}

# Whether PID is a daemon of this cluster: a pid file may outlive its process, and the pid be reused.
is_cluster_process() {
  local pid=$1
  [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "-c $DIR/ceph.conf"
}

# Kills the daemons named (mon.a, osd.0, client.rgw) by their pid files, and waits until they are gone.
kill_daemons() {
  local name pid pids=()
  for name in "$@"; do
    [ -f "$DIR/run/$name.pid" ] || continue
    pid=$(cat "$DIR/run/$name.pid")
    if [ -n "$pid" ] && is_cluster_process "$pid"; then
      kill -KILL "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
    rm -f "$DIR/run/$name.pid"
  done
  for pid in "${pids[@]}"; do
    while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  done
}

# Also finds daemons whose pid file was never written or already removed (a start killed midway).
kill_strays() {
  local pid
  for pid in $(pgrep -f -- "-c $DIR/ceph.conf" || true); do
    if [ "$pid" != "$$" ] && is_cluster_process "$pid"; then
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  for pid in $(pgrep -f -- "-c $DIR/ceph.conf" || true); do
    while [ "$pid" != "$$" ] && is_cluster_process "$pid"; do sleep 0.05; done
  done
}

load_state() {
  [ -f "$DIR/state" ] || die "$DIR holds no cluster (no $DIR/state)"
  # shellcheck source=/dev/null
  source "$DIR/state"
}

write_config() {
  local fsid=$1 mon_port=$2
  cat >"$DIR/ceph.conf" <<EOF
[global]
fsid = $fsid
mon_host = [v2:$ADDRESS:$mon_port]
public_addr = $ADDRESS
cluster_addr = $ADDRESS
ms_bind_msgr1 = false
auth_cluster_required = none
auth_service_required = none
auth_client_required = none
# Without cephx there is no session key to encrypt with; radosgw would insist on it towards the monitor.
ms_mon_client_mode = crc
ms_client_mode = crc
run_dir = $DIR/run
admin_socket = $DIR/run/\$name.asok
pid_file = $DIR/run/\$name.pid
log_file = $DIR/log/\$name.log
mon_cluster_log_file = $DIR/log/cluster.log
crash_dir = $DIR/crash
# Every daemon and tool gives up on an unreachable monitor with the start, not after the default five minutes.
client_mount_timeout = $START_TIMEOUT_S
log_to_stderr = false
err_to_stderr = true
# Two cores: fewer messenger threads than the default three.
ms_async_op_threads = 2
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_pool_default_pg_autoscale_mode = off
osd_crush_chooseleaf_type = 0
mon_allow_pool_size_one = true
mon_allow_pool_delete = true
# The machine's disk may be nearly full of other tests' files; the monitor would refuse to start below 5% free.
mon_data_avail_crit = 0
mon_data_avail_warn = 0
mon_warn_on_pool_no_redundancy = false

[mon]
mon_data = $DIR/mon
# A lone monitor need not batch its map changes for a second: radosgw's first start creates seven pools, one map
# change each, and waits for every one.
paxos_propose_interval = 0.05
paxos_min_wait = 0.01

[osd]
osd_data = $DIR/osd
osd_objectstore = memstore
memstore_device_bytes = ${CKPT_S3_MEMSTORE_BYTES:-4294967296}
# The smallest target the OSD accepts; memstore keeps no cache of its own to size.
osd_memory_target = 939524096
osd_op_num_shards = 1
osd_op_num_threads_per_shard = 2

[client]
# Short-lived tools (ceph, radosgw-admin) may run side by side: no admin socket for them to fight over.
admin_socket =
log_file = $DIR/log/client.log

[client.rgw]
admin_socket = $DIR/run/rgw.asok
log_file = $DIR/log/rgw.log
rgw_frontends = beast endpoint=$ADDRESS:$PORT
rgw_data = $DIR/rgw
rgw_init_timeout = $START_TIMEOUT_S
# Beast serves connections on coroutines; 16 threads keep 16 parallel uploads busy without 512 idle threads.
rgw_thread_pool_size = 16
# Deleted and overwritten objects free their memory (memstore) within seconds, not after two hours: a benchmark
# that overwrites a 1 GiB object a few times would otherwise fill the OSD, and a full OSD stalls every write.
rgw_gc_obj_min_wait = 5
rgw_gc_processor_period = 5
rgw_enable_usage_log = false
rgw_lc_max_worker = 1
EOF
}

start_monitor() {
  local fsid=$1 mon_port=$2
  monmaptool --create --fsid "$fsid" --addv a "[v2:$ADDRESS:$mon_port]" "$DIR/monmap" >/dev/null \
    || die "monmaptool failed"
  in_ns ceph-mon -c "$DIR/ceph.conf" --mkfs -i a --monmap "$DIR/monmap" >"$DIR/log/mkfs.log" 2>&1 \
    || fail_with_log "$DIR/log/mkfs.log" "ceph-mon --mkfs failed"
  in_ns ceph-mon -c "$DIR/ceph.conf" -i a >>"$DIR/log/mkfs.log" 2>&1 \
    || fail_with_log "$DIR/log/mon.a.log" "ceph-mon did not start"
}

start_osd() {
  local uuid
  uuid=$(cat /proc/sys/kernel/random/uuid)
  in_ns ceph -c "$DIR/ceph.conf" --connect-timeout 30 osd new "$uuid" >"$DIR/log/osd-new.log" 2>&1 \
    || fail_with_log "$DIR/log/mon.a.log" "ceph osd new failed: $(cat "$DIR/log/osd-new.log")"
  in_ns ceph-osd -c "$DIR/ceph.conf" -i 0 --mkfs --osd-uuid "$uuid" >>"$DIR/log/mkfs.log" 2>&1 \
    || fail_with_log "$DIR/log/osd.0.log" "ceph-osd --mkfs failed"
  in_ns ceph-osd -c "$DIR/ceph.conf" -i 0 >>"$DIR/log/mkfs.log" 2>&1 \
    || fail_with_log "$DIR/log/osd.0.log" "ceph-osd did not start"
}

# The HTTP status of an anonymous request to the gateway's root; 000 while nothing answers.
gateway_status() {
  in_ns curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://$ADDRESS:$PORT/" || true
}

start_gateway() {
  local deadline status pid
  in_ns radosgw -c "$DIR/ceph.conf" -n client.rgw >>"$DIR/log/rgw.stderr.log" 2>&1 \
    || fail_with_log "$DIR/log/rgw.log" "radosgw did not start"
  deadline=$((SECONDS + START_TIMEOUT_S))
  while true; do
    status=$(gateway_status)
    [ "$status" = 200 ] && return 0
    pid=$(cat "$DIR/run/client.rgw.pid" 2>/dev/null || true)
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
      fail_with_log "$DIR/log/rgw.log" "radosgw exited before answering"
    fi
    [ "$SECONDS" -lt "$deadline" ] \
      || fail_with_log "$DIR/log/rgw.log" "radosgw did not answer on $ADDRESS:$PORT within ${START_TIMEOUT_S}s"
    sleep 0.2
  done
}

create_user_and_bucket() {
  local status
  in_ns radosgw-admin -c "$DIR/ceph.conf" user create --uid ckpt-test --display-name "ckpt tests" \
    --access-key "$ACCESS_KEY" --secret-key "$SECRET_KEY" >"$DIR/log/user-create.log" 2>&1 \
    || fail_with_log "$DIR/log/user-create.log" "radosgw-admin user create failed"
  # curl 7.88 signs no x-amz-content-sha256 header, and radosgw rejects a signature without one.
  status=$(in_ns curl -s -o "$DIR/log/bucket-create.log" -w '%{http_code}' --max-time 30 \
    --aws-sigv4 "aws:amz:$REGION:s3" --user "$ACCESS_KEY:$SECRET_KEY" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
    -X PUT "http://$ADDRESS:$PORT/$BUCKET" || true)
  [ "$status" = 200 ] || fail_with_log "$DIR/log/bucket-create.log" "creating bucket $BUCKET answered HTTP $status"
}

# Exits 77, the tests' code for a skip, where Ceph is not installed: tools/deps.sh installs it.
require_programs() {
  local program
  for program in ceph ceph-mon ceph-osd monmaptool radosgw radosgw-admin curl ss; do
    command -v "$program" >/dev/null 2>&1 && continue
    echo "s3_server.sh: $program is not installed (tools/deps.sh installs it); no S3 server" >&2
    exit 77
  done
}

cmd_start() {
  local fsid mon_port started=$SECONDS
  require_programs
  ADDRESS=127.0.0.1 PORT="" NETNS=""
  while [ $# -gt 0 ]; do
    case $1 in
      --address) ADDRESS=$2; shift 2 ;;
      --port) PORT=$2; shift 2 ;;
      --netns) NETNS=$2; shift 2 ;;
      *) usage ;;
    esac
  done
  if [ -n "$NETNS" ]; then
    ip netns exec "$NETNS" true 2>/dev/null || die "no network namespace $NETNS"
  fi
  if [ -d "$DIR" ]; then
    kill_stale_cluster
    rm -rf "$DIR"
  fi
  mkdir -p "$DIR"/{run,log,crash,mon,osd,rgw}
  [ -n "$PORT" ] || PORT=$(free_port)
  mon_port=$(free_port)
  fsid=$(cat /proc/sys/kernel/random/uuid)
  printf 'ADDRESS=%q\nPORT=%q\nNETNS=%q\n' "$ADDRESS" "$PORT" "$NETNS" >"$DIR/state"
  write_config "$fsid" "$mon_port"
  start_monitor "$fsid" "$mon_port"
  start_osd
  start_gateway
  create_user_and_bucket
  cat >"$DIR/env" <<EOF
AWS_ENDPOINT_URL=http://$ADDRESS:$PORT
AWS_ACCESS_KEY_ID=$ACCESS_KEY
AWS_SECRET_ACCESS_KEY=$SECRET_KEY
AWS_REGION=$REGION
CKPT_S3_TEST_BUCKET=$BUCKET
EOF
  echo "s3_server.sh: S3 at http://$ADDRESS:$PORT${NETNS:+ (netns $NETNS)}, ready in $((SECONDS - started))s;" \
    "settings in $DIR/env"
}

kill_stale_cluster() {
  kill_daemons client.rgw osd.0 mon.a
  kill_strays
}

cmd_stop() {
  [ -d "$DIR" ] || return 0
  kill_stale_cluster
  find "$DIR" -mindepth 1 -maxdepth 1 ! -name log -exec rm -rf {} +
}

cmd_stop_gateway() {
  load_state
  kill_daemons client.rgw
}

cmd_start_gateway() {
  load_state
  [ "$(gateway_status)" = 000 ] || die "a gateway already answers on $ADDRESS:$PORT"
  start_gateway
}

[ $# -ge 2 ] || usage
command=$1
DIR=$(realpath -m "$2")
shift 2
case $command in
  start) cmd_start "$@" ;;
  stop) cmd_stop ;;
  stop-gateway) cmd_stop_gateway ;;
  start-gateway) cmd_start_gateway ;;
  *) usage ;;
esac
