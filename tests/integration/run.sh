#!/usr/bin/env bash
# Runs one multi-process scenario: tests/integration/run.sh NAME LAUNCH PROGRAMS WORKDIR
# Each scenario uses ckpt-launch to start real rank processes talking over loopback. PROGRAMS is the folder holding
# the scenario programs, one per area (the modes of each are listed at the top of its source).
set -euo pipefail
name=$1 launch=$2 programs=$3 work=$4
core="$programs/ckpt_scenario_core" async="$programs/ckpt_scenario_async" exchange="$programs/ckpt_scenario_exchange"
rm -rf "$work" && mkdir -p "$work"
ck="$work/ckpt"
run() { local n=$1 program=$2; shift 2; "$launch" -n "$n" --timeout 60 -- "$program" "$@"; }

case "$name" in
  reshard)            # saved on 4 ranks, loaded on 1..5; saved on 2 loaded on 4; saved on 3 loaded on 5
    run 4 "$core" save "$ck"
    for m in 1 2 3 4 5; do run "$m" "$core" load "$ck"; done
    run 2 "$core" save "$ck-2" && run 4 "$core" load "$ck-2"
    run 3 "$core" save "$ck-3" && run 5 "$core" load "$ck-3" ;;
  reshard-no-exchange)  # the same without a transport: every rank reads what it needs itself
    export CKPT_TRANSPORT=none
    run 4 "$core" save "$ck"
    for m in 2 3 5; do run "$m" "$core" load "$ck"; done ;;
  peer-dies-in-exchange)  # the last rank dies right before the exchange: every other rank fails, none hangs
    run 4 "$core" save-replicated "$ck"
    rc=0
    out=$(CKPT_FAULT_EXIT_BEFORE_EXCHANGE=3 CKPT_TIMEOUT_MS=30000 "$launch" -n 4 --grace 60 --timeout 120 -- \
          "$exchange" load-replicated-expect-failure "$ck" 2>&1) || rc=$?
    echo "$out"
    # The victim exits with 99; the launcher reports it. Every survivor must have failed cleanly, not been killed.
    [ "$rc" = 99 ] || { echo "expected the launcher to report the victim's exit code 99, got $rc" >&2; exit 1; }
    if echo "$out" | grep -q "FAILED\|killed by signal"; then echo "a surviving rank failed or hung" >&2; exit 1; fi
    echo "$out" | grep -q "peer died in the exchange" || { echo "rank 0 did not report the failure" >&2; exit 1; } ;;
  dedup)              # replicated bytes written once, writers balanced
    run 4 "$core" save-replicated "$ck"
    "$core" check-dedup "$ck" ;;
  invalid-overlap|invalid-gap|invalid-dtype|invalid-shape)
    run 3 "$core" save-invalid "${name#invalid-}" "$ck" ;;
  exists)             # a committed checkpoint is never overwritten
    run 2 "$core" save "$ck"
    run 2 "$core" save-exists "$ck"
    run 3 "$core" load "$ck" ;;
  corrupt-byte)       # one flipped bit: the load names the tensor and the file
    run 2 "$core" save "$ck"
    file=$("$core" corrupt-chunk "$ck" w)
    run 3 "$core" load-expect "$ck" 5 "'w'" "$file" checksum ;;
  truncated-file)
    run 2 "$core" save "$ck"
    truncate -s 100 "$ck/data/1-0.bin"
    run 2 "$core" load-expect "$ck" 5 "data/1-0.bin" truncated ;;
  missing-manifest)
    run 2 "$core" save "$ck"
    rm "$ck/MANIFEST"
    run 2 "$core" load-expect "$ck" 2 MANIFEST
    run 2 "$core" load-expect "$work/nowhere" 2 nowhere ;;
  foreign-manifest)
    run 2 "$core" save "$ck"
    echo "this is not a checkpoint manifest, it is a text file of some length" > "$ck/MANIFEST"
    run 2 "$core" load-expect "$ck" 5 MANIFEST ;;
  corrupt-manifest)
    run 2 "$core" save "$ck"
    "$core" xor-byte "$ck/MANIFEST" 100 0x04
    run 2 "$core" load-expect "$ck" 5 MANIFEST ;;
  newer-version)      # format major 1 -> 3 in the header: refused as a newer version
    run 2 "$core" save "$ck"
    "$core" xor-byte "$ck/MANIFEST" 8 0x02
    run 2 "$core" load-expect "$ck" 6 ;;
  strictness)
    run 2 "$core" save "$ck"
    run 3 "$core" load-strict "$ck" ;;
  shape-mismatch)
    run 2 "$core" save "$ck"
    run 2 "$core" load-shape-mismatch "$ck" ;;
  dead-rank)
    run 3 "$core" dead-rank "$ck" ;;
  read-once)          # 4 replicas load everything: each stored byte read once over UCX, 4 times without it
    run 4 "$core" save-replicated "$ck"
    unique=$("$core" check-dedup "$ck" | sed -n 's/^unique \([0-9]*\) B.*/\1/p')
    for mode in ucx none; do
      out=$(CKPT_TRANSPORT=$mode run 4 "$exchange" load-replicated "$ck")
      echo "$out"
      read_total=$(echo "$out" | awk '/bytes_read/ {sum += $6} END {print sum}')
      amplification=$(awk -v r="$read_total" -v u="$unique" 'BEGIN {printf "%.2f", r / u}')
      echo "transport $mode: read_amplification $amplification"
      expected=$([ "$mode" = ucx ] && echo 1.00 || echo 4.00)
      [ "$amplification" = "$expected" ] || { echo "expected read amplification $expected" >&2; exit 1; }
    done ;;
  worker-missing)     # rank 1 cannot start its I/O workers: every rank's context creation fails, naming rank 1
    "$launch" -n 3 --timeout 60 -- sh -c '[ "$RANK" = 1 ] && export CKPT_WORKER_PATH=/nonexistent/ckpt-io-worker;
      exec "$0" context-fails 2 "rank 1"' "$exchange" ;;
  async)              # buffers reusable at return; back-to-back saves
    run 3 "$async" async "$ck" ;;
  plan-cache)
    run 3 "$async" plan-cache "$ck" ;;
  worker-killed)      # SIGKILL of an I/O worker mid-save
    CKPT_TIMEOUT_MS=20000 run 3 "$async" worker-killed "$ck" ;;
  big-state)          # 4x the staging arena
    run 2 "$async" big-state "$ck" ;;
  full-disk)          # a 24 MiB tmpfs: ENOSPC must fail the save everywhere and keep latest
    mkdir -p "$work/tmpfs"
    if ! mount -t tmpfs -o size=24m tmpfs "$work/tmpfs" 2>/dev/null; then
      echo "SKIP: cannot mount a tmpfs here (needs root); full-disk scenario not run"
      exit 77
    fi
    trap 'umount "$work/tmpfs"' EXIT
    run 2 "$async" full-disk "$work/tmpfs/root" ;;
  io-error)           # a test build's fault hook fails step 2's writes with EIO
    CKPT_FAULT_EIO_PATH=step-000000000002.tmp- run 2 "$async" io-error "$ck" ;;
  short-transfers)    # a test build's fault hook cuts every read and write after 4 KiB: each is resumed until whole
    export CKPT_FAULT_SHORT_TRANSFER_BYTES=4096
    run 2 "$core" save-replicated "$ck"
    run 3 "$exchange" load-replicated "$ck" ;;
  *) echo "unknown scenario $name" >&2; exit 2 ;;
esac
echo "scenario $name: PASS"
