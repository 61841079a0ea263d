#!/usr/bin/env bash
# Jobs on three hosts, two ranks each: the hosts are network namespaces of this machine on one bridge
# (tests/integration/netns_hosts.sh), each rank started as torchrun would on its host, with the store at rank 0's
# host's bridge address (MASTER_ADDR), the job secret, and CKPT_NODE_NAME naming the host.
# Usage: three_hosts.sh PART HOSTS_PROGRAM CONTROL_PROGRAM CKPT_CLI WORKDIR
#   (HOSTS_PROGRAM: ckpt_scenario_hosts, CONTROL_PROGRAM: ckpt_scenario_control, CKPT_CLI: the ckpt tool).
#   Needs root for the namespaces; skips (77) without.
#
#   save-load   Proves a checkpoint saved by 6 ranks on 3 hosts is loaded, resharded, by 4 ranks on 2 of the hosts,
#               every element checked, with the read-once exchange over UCX carrying "big" across the bridge (the
#               hosts' link counters show it; the ranks' figures show "big" read once and sent to the others).
#   link-cut-mid-save
#               Proves that when a host's link is cut in the middle of a save (its ranks are held inside the save,
#               before their write report, until the cut is made), every rank, on every host, fails that save cleanly
#               within the timeout, nothing is committed, and the checkpoint saved before still verifies. Also proves
#               that no rank talks over loopback: at the moment of the cut every connection of every host is between
#               bridge addresses, and hosts 1 and 2 hold connections to the store at host 0's address.
#   s3-save-load
#               Proves that 6 ranks on 3 hosts save one checkpoint to an S3 server on a fourth host (a radosgw started
#               there by tools/s3_server.sh), each host uploading its own share across the bridge, and that 4 ranks
#               on 2 of the hosts load it resharded, every element checked.
set -euo pipefail
part=$1 program=$2 control=$3 cli=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
source "$(dirname "$0")/netns_hosts.sh"
HOSTS_WORK=$work
# The three hosts share this machine's memory: each rank's default arena (an eighth of memory per host) would make
# six of them take seconds to start. ctest sets a small one; so does a run by hand.
export CKPT_ARENA_BYTES=${CKPT_ARENA_BYTES:-$((64 << 20))}

s3_server=$work/s3
cleanup() {
  # The ranks of a job still running (this script failed): each is bounded by its timeout, but need not outlive us.
  for pid in "${JOB_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  [ ! -f "$s3_server/env" ] || bash "$(dirname "$0")/../../tools/s3_server.sh" stop "$s3_server" || true
  hosts_cleanup
}
trap cleanup EXIT
trap 'exit 143' TERM INT HUP  # bash runs no EXIT trap when a signal kills it
hosts_remove_stale ckpt3h
# 10.232.x: apart from slurm_two_hosts.sh's 10.231.x (the switch is private to this run anyway).
if ! hosts_switch "ckpt3h-$$"; then
  echo "SKIP: cannot create network namespaces here (needs root)"
  exit 77
fi
# The S3 part's server has a host of its own, the fourth.
hosts_create "ckpt3h-$$" "$([ "$part" = s3-save-load ] && echo 4 || echo 3)" "10.232.$(($$ % 200 + 20))"
ck="$work/ckpt"
big_bytes=$((512 * 1024 * 4))                        # "big" (scenario_hosts.cc): replicated, needed by every rank
unique_bytes=$((601 * 1000 * 4 + big_bytes))         # "w" and "big": what the checkpoint holds

# The sum over the load's ranks of the figure NAME they printed.
figure() {
  cat "$work"/load-rank-*.log | awk -v name="$1" '{for (i = 1; i < NF; i++) if ($i == name) sum += $(i + 1)}
    END {print sum + 0}'
}

save_load() {
  job_start save 30 0 "0 0 1 1 2 2" "$program" save-hosts "$ck"
  job_finish
  "$control" check-world "$ck" 6
  "$cli" verify "$ck"

  # Hosts 1 and 2 load it: host 1 holds the new job's store.
  local rx_before=$(($(hosts_rx_bytes 1) + $(hosts_rx_bytes 2)))
  JOB_ENV=(CKPT_TRANSPORT=ucx)
  job_start load 30 1 "1 1 2 2" "$program" load-hosts "$ck"
  job_finish
  local rx=$(($(hosts_rx_bytes 1) + $(hosts_rx_bytes 2) - rx_before))

  local ucx_ranks read_total sent_total received_total
  ucx_ranks=$(cat "$work"/load-rank-*.log | grep -c "transport 2 bytes_read" || true)  # 2: CKPT_TRANSPORT_UCX
  [ "$ucx_ranks" = 4 ] || { echo "expected 4 ranks loading over UCX, got $ucx_ranks" >&2; exit 1; }
  read_total=$(figure bytes_read) sent_total=$(figure bytes_sent) received_total=$(figure bytes_received)
  echo "load: read $read_total B (the checkpoint holds $unique_bytes B), sent $sent_total B, received" \
    "$received_total B; the two hosts' links received $rx B"
  # Each rank needs all of "big" and receives what it did not read: read once in all, the exchange carries it
  # three times. (A stored block of "w" whose rows two ranks need is read by one of them, which sends the other its
  # rows: issue #14.)
  [ "$sent_total" = "$received_total" ] || { echo "the ranks sent and received different byte counts" >&2; exit 1; }
  [ "$received_total" -ge $((3 * big_bytes)) ] || { echo "expected \"big\" read once and exchanged" >&2; exit 1; }
  # Every byte of "big" read on one host must reach both ranks of the other host: whichever way the reads are
  # split between the hosts, the links carry twice "big" into them. Were the other host reached through shared
  # memory, or every rank reading alone, they would carry next to nothing.
  [ "$rx" -ge $((2 * big_bytes)) ] || { echo "expected at least $((2 * big_bytes)) B over the bridge" >&2; exit 1; }
}

# Every established TCP connection on host I, as "local peer" pairs.
connections() { ip netns exec "${HOSTS[$1]}" ss -Htn state established | awk '{print $(NF - 1), $NF}'; }

check_no_loopback() {
  local store="${HOST_ADDRESSES[0]}:$((HOSTS_MASTER_PORT + 1))" i  # ckpt's store: the port after MASTER_PORT
  for i in 0 1 2; do
    connections "$i" | sed "s/^/host $i: /"
    if connections "$i" | grep -Eq '(^| )(127\.|\[::1\]|\[::ffff:127\.)'; then
      echo "host $i has a connection over loopback" >&2
      exit 1
    fi
  done
  for i in 1 2; do
    if ! connections "$i" | awk -v store="$store" '$2 == store {found = 1} END {exit !found}'; then
      echo "host $i holds no connection to the store at $store" >&2
      exit 1
    fi
  done
}

# Whether ranks 0-3 are past the plan of the second save and host 2's ranks 4 and 5 wait inside it.
all_in_the_save() {
  local f
  for f in saving-0 saving-1 saving-2 saving-3 held-4 held-5; do [ -e "$1/$f" ] || return 1; done
}

link_cut() {
  local signals="$work/signals" waited=0
  mkdir -p "$signals"
  # Short enough that the test takes seconds, long enough for 2 cores running 6 ranks.
  JOB_ENV=(CKPT_TIMEOUT_MS=5000)
  job_start cut 30 0 "0 0 1 1 2 2" "$program" save-link-cut "$ck/first" "$ck/second" "$signals" 4,5
  # Host 2's ranks wait inside the save before their write report, so that no commit can happen before the cut.
  until all_in_the_save "$signals"; do
    sleep 0.05
    waited=$((waited + 1))
    if [ "$waited" -ge 400 ]; then
      echo "the ranks did not all reach the second save within 20 s" >&2
      job_finish || true
      exit 1
    fi
  done
  check_no_loopback
  hosts_cut 2
  touch "$signals/cut"
  echo "host 2's link cut"
  job_finish
  [ ! -e "$ck/second" ] || { echo "the save cut off from host 2 was committed" >&2; exit 1; }
  if ls -d "$ck"/second.tmp-* 2>/dev/null; then echo "the failed save left its temporary directory" >&2; exit 1; fi
  "$cli" verify "$ck/first"
  "$control" check-world "$ck/first" 6
}

# Runs `ckpt` on host 0, which reaches the S3 host over the bridge as the ranks do.
cli_on_host0() {
  hosts_prefix 0
  "${HOST_PREFIX[@]}" env "${JOB_ENV[@]}" "$cli" "$@"
}

s3_save_load() {
  bash "$(dirname "$0")/../../tools/s3_server.sh" start "$s3_server" --netns "${HOSTS[3]}" \
    --address "${HOST_ADDRESSES[3]}"
  local settings
  mapfile -t settings < "$s3_server/env"
  local bucket
  bucket=$(sed -n 's/^CKPT_S3_TEST_BUCKET=//p' "$s3_server/env")
  local url="s3://$bucket/three-hosts/ckpt"
  JOB_ENV=("${settings[@]}")
  local rx_before
  rx_before=$(hosts_rx_bytes 3)
  job_start save 60 0 "0 0 1 1 2 2" "$program" save-hosts "$url"
  job_finish
  local uploaded=$(($(hosts_rx_bytes 3) - rx_before))
  echo "the S3 host received $uploaded B during the save (the checkpoint holds $unique_bytes B)"
  [ "$uploaded" -ge "$unique_bytes" ] || { echo "the checkpoint's bytes did not cross to the S3 host" >&2; exit 1; }
  cli_on_host0 verify "$url"
  cli_on_host0 ls "$url" | grep -q "saved by 6 ranks on 3 nodes" || { echo "ckpt ls does not show 6 ranks on 3 nodes" >&2; exit 1; }
  JOB_ENV+=(CKPT_TRANSPORT=ucx)
  job_start load 60 1 "1 1 2 2" "$program" load-hosts "$url"
  job_finish
}

case "$part" in
  save-load) save_load ;;
  s3-save-load) s3_save_load ;;
  link-cut-mid-save) link_cut ;;
  *) echo "unknown part $part" >&2; exit 2 ;;
esac
echo "three hosts, $part: PASS"
