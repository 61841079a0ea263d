#!/usr/bin/env bash
# Runs one multi-process scenario: tests/integration/run.sh NAME LAUNCH PROGRAMS WORKDIR
# Each scenario uses ckpt-launch to start real rank processes talking over loopback. PROGRAMS is the folder holding
# the scenario programs, one per area (the modes of each are listed at the top of its source).
set -euo pipefail
name=$1 launch=$2 programs=$3 work=$4
core="$programs/ckpt_scenario_core" async="$programs/ckpt_scenario_async" exchange="$programs/ckpt_scenario_exchange"
control="$programs/ckpt_scenario_control" reads="$programs/ckpt_scenario_reads"
rm -rf "$work" && mkdir -p "$work"
ck="$work/ckpt"
run() { local n=$1 program=$2; shift 2; "$launch" -n "$n" --timeout 60 -- "$program" "$@"; }

# Loads $ck on $1 ranks with "$exchange" $2 (which prints "rank R rounds N"), over UCX, read once, in rounds of $3
# bytes: as it is, then told not to scatter (CKPT_FAULT_NO_SCATTER). The first must take 1 round and the second 2 or
# more; $4 says what the second does instead.
one_round_only_scattering() {
  local n=$1 mode=$2 bytes=$3 instead=$4 scattered buffered rounds_scattered rounds_buffered
  scattered=$(CKPT_FAULT_LOAD_ROUND_BYTES=$bytes CKPT_LOAD_READS=once CKPT_TRANSPORT=ucx run "$n" "$exchange" "$mode" "$ck")
  echo "$scattered"
  buffered=$(CKPT_FAULT_NO_SCATTER=1 CKPT_FAULT_LOAD_ROUND_BYTES=$bytes CKPT_LOAD_READS=once CKPT_TRANSPORT=ucx \
             run "$n" "$exchange" "$mode" "$ck")
  echo "$buffered"
  rounds_scattered=$(echo "$scattered" | sed -n 's/^rank 0 rounds \([0-9]*\)$/\1/p')
  rounds_buffered=$(echo "$buffered" | sed -n 's/^rank 0 rounds \([0-9]*\)$/\1/p')
  echo "rounds: $rounds_scattered scattering, $rounds_buffered not ($instead)"
  [ "$rounds_scattered" = 1 ] && [ "${rounds_buffered:-0}" -ge 2 ] ||
    { echo "expected 1 round scattering and 2 or more not ($instead)" >&2; exit 1; }
}

case "$name" in
  reshard)            # saved on 4 ranks, loaded on 1..5; saved on 2 loaded on 4; saved on 3 loaded on 5
    run 4 "$core" save "$ck"
    for m in 1 2 3 4 5; do run "$m" "$core" load "$ck"; done
    run 2 "$core" save "$ck-2" && run 4 "$core" load "$ck-2"
    run 3 "$core" save "$ck-3" && run 5 "$core" load "$ck-3" ;;
  peer-grid)          # saved on 13 ranks and loaded on 11, their peer planes on grids (CKPT_PEER_DIRECT_RANKS=4):
    # every all-to-all of the save and the load in two hops, each rank linked only to its row and column of a 4 x 4
    # grid (at most 64 neighbours), and each row of 3 ranks reaching the store through its relay
    saved=$(CKPT_PEER_DIRECT_RANKS=4 CKPT_LOG_LEVEL=info run 13 "$core" save "$ck" 2>&1) || { echo "$saved"; exit 1; }
    echo "$saved" | grep -q "a grid of 4 x 4 (6 other ranks at rank 0) and sends its all-to-alls in 2 hops.*each row of 3 ranks reaches the store through a relay" ||
      { echo "$saved" | tail -20; echo "the save did not say it ran over a grid of 4 x 4" >&2; exit 1; }
    CKPT_PEER_DIRECT_RANKS=4 run 11 "$core" load "$ck" ;;
  reshard-in-place)   # saved in place (CKPT_SAVE_IN_PLACE) on 4 and 3 ranks, loaded on other counts
    run 4 "$core" save-in-place "$ck"
    for m in 1 3 5; do run "$m" "$core" load "$ck"; done
    run 3 "$core" save-in-place "$ck-3" && run 2 "$core" load "$ck-3" ;;
  manifest-sections)  # 4,608 chunks saved on 4 ranks: a manifest in sections (format 4), loaded on 3 and 5 ranks
    # through the exchange and on 2 without it, each rank reading the sections it needs; a few chunks stay in the
    # format before (1), read whole, by the same loads
    run 4 "$reads" save-sections "$ck"
    for m in 3 5; do run "$m" "$reads" load-sections "$ck"; done
    CKPT_TRANSPORT=none run 2 "$reads" load-sections "$ck"
    run 4 "$core" save "$ck-few"
    major=$(od -An -tu4 -j8 -N4 "$ck-few/MANIFEST" | tr -d ' ')
    [ "$major" = 1 ] || { echo "a manifest of a few chunks is format $major, expected 1"; exit 1; }
    run 3 "$core" load "$ck-few" ;;
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
  peer-dies-in-later-round)  # rounds of 64 KiB: the last rank dies before round 2's exchange, while every other
    # rank reads round 3 ahead on a thread of its own: every other rank fails cleanly, none hangs or aborts. The victim
    # dies only if the load has that many rounds (else it ends well and the launcher's code is 0).
    run 4 "$core" save-replicated "$ck"
    rc=0
    out=$(CKPT_FAULT_LOAD_ROUND_BYTES=65536 CKPT_LOAD_READS=once CKPT_TRANSPORT=ucx \
          CKPT_FAULT_EXIT_BEFORE_EXCHANGE=3@2 CKPT_TIMEOUT_MS=30000 "$launch" -n 4 --grace 60 --timeout 120 -- \
          "$exchange" load-replicated-expect-failure "$ck" 2>&1) || rc=$?
    echo "$out"
    [ "$rc" = 99 ] || { echo "expected the launcher to report the victim's exit code 99, got $rc" >&2; exit 1; }
    if echo "$out" | grep -q "FAILED\|killed by signal"; then echo "a surviving rank failed or hung" >&2; exit 1; fi
    [ "$(echo "$out" | grep -c "peer failed in the exchange")" = 3 ] ||
      { echo "expected the 3 other ranks to report the failed peer" >&2; exit 1; } ;;
  peer-stops-in-exchange | peer-stops-in-exchange-32 | peer-stops-in-exchange-32-grid)  # a rank stops (alive,
    # silent) before the exchange: the others fail within 1.5 x the timeout (+ 2 s). Of 4 ranks the last stops; of
    # 32, one in the middle of the job; of 32 on a grid (CKPT_PEER_DIRECT_RANKS=4), rank 12, whose relay carries the
    # store connections of its row of 4, so that ranks 13 to 15 lose the store with it.
    n=4 victim=3 timeout_ms=8000 direct_ranks=256
    [ "$name" = peer-stops-in-exchange-32 ] && n=32 victim=17 timeout_ms=20000
    [ "$name" = peer-stops-in-exchange-32-grid ] && n=32 victim=12 timeout_ms=20000 direct_ranks=4
    CKPT_PEER_DIRECT_RANKS=$direct_ranks run "$n" "$core" save-replicated "$ck"
    CKPT_PEER_DIRECT_RANKS=$direct_ranks CKPT_FAULT_STOP_BEFORE_EXCHANGE=$victim CKPT_TIMEOUT_MS=$timeout_ms \
      "$launch" -n "$n" --grace 60 --timeout 120 -- \
      "$exchange" load-replicated-expect-failure "$ck" > "$work/out" 2>&1 &
    launcher=$!
    # Once the others have reported, the stopped rank (a child of the launcher in state T) is killed.
    for _ in $(seq 900); do
      [ "$(grep -c "peer failed in the exchange" "$work/out")" -ge $((n - 1)) ] && break
      grep -q "FAILED" "$work/out" && break
      sleep 0.1
    done
    for pid in $(ps -o pid=,stat= --ppid "$launcher" | awk '$2 ~ /^T/ {print $1}'); do kill -KILL "$pid"; done
    rc=0; wait "$launcher" || rc=$?
    cat "$work/out"
    [ "$rc" = 137 ] || { echo "expected the stopped rank to be killed (137), got $rc" >&2; exit 1; }
    [ "$(grep -c "peer failed in the exchange" "$work/out")" = $((n - 1)) ] ||
      { echo "not every rank failed cleanly" >&2; exit 1; } ;;
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
  manifest-bad-chunk)  # a tensor's chunk records damaged behind a valid checksum: found when the tensor's chunks are
    # decoded, by its owner as it plans (exchange) or by each rank that reads it (none), and refused on every rank
    run 2 "$core" save "$ck"
    "$programs/ckpt_manifest_tamper" "$ck" w
    run 3 "$core" load-expect "$ck" 5 "tensor 'w'" "block size is 0"
    CKPT_TRANSPORT=none run 3 "$core" load-expect "$ck" 5 "tensor 'w'" "block size is 0" ;;
  newer-version)      # format major 1 -> 5 in the header: refused as a newer version
    run 2 "$core" save "$ck"
    "$core" xor-byte "$ck/MANIFEST" 8 0x04
    run 2 "$core" load-expect "$ck" 6 ;;
  strictness)
    run 2 "$core" save "$ck"
    run 3 "$core" load-strict "$ck" ;;
  shape-mismatch)
    run 2 "$core" save "$ck"
    run 2 "$core" load-shape-mismatch "$ck" ;;
  dtype-cast)         # F32 saved on 3 ranks, loaded as BF16 (and F64) on 2: over UCX, then each rank reading alone
    run 3 "$core" save "$ck"
    run 2 "$core" load-cast "$ck"
    CKPT_TRANSPORT=none run 2 "$core" load-cast "$ck" ;;
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
  kept-read-corrupt)  # a corrupt block that only rank 0 reads and keeps ("v"), found while the others exchange "m":
    # every rank fails naming the tensor (the reads a rank keeps run during the exchange, and join its agreement)
    run 4 "$exchange" save-layout "$ck"
    file=$("$core" corrupt-chunk "$ck" v)
    CKPT_LOAD_READS=once run 3 "$exchange" load-layout-expect rows "$ck" 5 "'v'" "$file" checksum ;;
  sent-read-corrupt)  # a corrupt block of "big", which the even ranks keep whole and its readers send from their own
    # tensor: every rank fails naming the tensor and the file, the receivers too (nothing is sent)
    run 4 "$core" save-replicated "$ck"
    file=$("$core" corrupt-chunk "$ck" big)
    run 4 "$exchange" load-replicated-expect "$ck" 5 "'big'" "$file" checksum ;;
  read-once-3to5-columns|read-once-4to3-rows|read-once-2to7-rows)
    # Saved on N ranks in uneven row blocks, loaded on M in other uneven parts (pieces smaller than a checksum block,
    # pieces meeting inside one): over UCX, the ranks together read exactly the bytes stored of the tensors (read
    # amplification 1.00); without a transport each rank reads what it needs itself, and still gets every element.
    # (CKPT_LOAD_READS=once: on one node, with local storage, a load may choose own reads instead.)
    layout=${name#read-once-}; n=${layout%%to*}; rest=${layout#*to}; m=${rest%%-*}; split=${rest#*-}
    run "$n" "$exchange" save-layout "$ck"
    stored=$("$exchange" stored-bytes "$ck" | sed -n 's/^stored \([0-9]*\)$/\1/p')
    for mode in ucx none; do
      out=$(CKPT_TRANSPORT=$mode CKPT_LOAD_READS=once run "$m" "$exchange" load-layout "$split" "$ck")
      echo "$out"
      read_total=$(echo "$out" | awk '/bytes_read/ {sum += $6} END {print sum}')
      [ "$(echo "$out" | grep -c bytes_read)" = "$m" ] || { echo "expected $m ranks to report" >&2; exit 1; }
      amplification=$(awk -v r="$read_total" -v u="$stored" 'BEGIN {printf "%.2f", r / u}')
      echo "$n -> $m ($split), transport $mode: read $read_total of $stored stored bytes, read_amplification $amplification"
      if [ "$mode" = ucx ] && [ "$read_total" != "$stored" ]; then
        echo "expected every stored byte read exactly once (read amplification 1.00)" >&2; exit 1
      fi
    done ;;
  read-once-many-rounds)  # rounds of 64 KiB (CKPT_FAULT_LOAD_ROUND_BYTES): each read of a chunk saved on 7 ranks
    # makes a round of its own (4 per reader), the next round reading its sends while one exchanges; every element
    # arrives and every stored byte is read exactly once
    run 7 "$exchange" save-layout "$ck"
    stored=$("$exchange" stored-bytes "$ck" | sed -n 's/^stored \([0-9]*\)$/\1/p')
    out=$(CKPT_FAULT_LOAD_ROUND_BYTES=65536 CKPT_LOAD_READS=once CKPT_TRANSPORT=ucx run 4 "$exchange" load-layout rows "$ck")
    echo "$out"
    read_total=$(echo "$out" | awk '/bytes_read/ {sum += $6} END {print sum}')
    [ "$read_total" = "$stored" ] || { echo "expected every stored byte read once: read $read_total of $stored" >&2; exit 1; }
    out=$(CKPT_FAULT_LOAD_ROUND_BYTES=65536 CKPT_LOAD_READS=once CKPT_TRANSPORT=ucx run 3 "$exchange" load-layout columns "$ck")
    echo "$out" ;;
  exchange-buffers-in-arena)  # a read-once load's exchange buffers are regions of the staging arena where it holds
    # four round budgets (512 MiB against rounds of 128 MiB): nothing committed for the load; with 256 MiB they are
    # memory committed for the load, and the arena holds none. Rank 0's INFO line says which.
    run 4 "$exchange" save-layout "$ck"
    for arena_mib in 512 256; do
      out=$(CKPT_ARENA_BYTES=$((arena_mib << 20)) CKPT_LOAD_READS=once CKPT_TRANSPORT=ucx \
            run 3 "$exchange" load-layout columns "$ck")
      echo "$out"
      expected="^rank 0 exchange buffers [0-9.]+ [kM]B in the staging arena and 0 B committed$"
      [ "$arena_mib" = 256 ] && expected="^rank 0 exchange buffers 0 B in the staging arena and [0-9.]+ [kM]B committed$"
      echo "$out" | grep -Eq "$expected" || { echo "arena of $arena_mib MiB: expected $expected" >&2; exit 1; }
    done ;;
  read-once-scattered)  # "w" saved in 8 column blocks of 1 MiB, loaded as column halves by 4 ranks (two replicas
    # of each) in rounds of 1 MiB (CKPT_FAULT_LOAD_ROUND_BYTES): over UCX each block is sent from its reader's half
    # and lands in its replica's, scattered over 256 rows of 4 KiB in both, so that no buffer holds it and the load
    # takes one round; told not to scatter (CKPT_FAULT_NO_SCATTER), the blocks go through buffers, a round each
    run 8 "$exchange" save-wide "$ck"
    one_round_only_scattering 4 load-wide 1048576 "through buffers" ;;
  read-once-small-shared)  # 64 tensors of 32 KiB, replicated on 6 ranks: each read once and sent to the 5 others,
    # packed with each pair's other small transfers, in rounds of 2 MiB (CKPT_FAULT_LOAD_ROUND_BYTES); over UCX the
    # reader holds each region once and gathers every pair's packed message from there, so that its sends fit one
    # round; told not to scatter (CKPT_FAULT_NO_SCATTER), it copies each region into each pair's buffer: 3 rounds
    run 2 "$exchange" save-small "$ck"
    one_round_only_scattering 6 load-small 2097152 "copies into each pair's buffer" ;;
  without-ucx)        # UCX absent (tests/integration/without_ucx.sh): auto loads without a transport, ucx is refused
    without_ucx="$(dirname "$0")/without_ucx.sh"
    run 4 "$core" save-replicated "$ck"
    out=$(CKPT_TRANSPORT=auto "$without_ucx" "$launch" -n 4 --timeout 60 -- "$exchange" load-replicated "$ck")
    echo "$out"
    ranks_without=$(echo "$out" | grep -c "transport 1 bytes_read" || true)  # 1: CKPT_TRANSPORT_NONE
    [ "$ranks_without" = 4 ] || { echo "expected 4 ranks loading without a transport, got $ranks_without" >&2; exit 1; }
    CKPT_TRANSPORT=ucx "$without_ucx" "$launch" -n 2 --timeout 60 -- "$exchange" context-fails 11 "libucp.so.0" ;;
  worker-missing)     # rank 1 cannot start its I/O workers: every rank's context creation fails, naming rank 1
    "$launch" -n 3 --timeout 60 -- sh -c '[ "$RANK" = 1 ] && export CKPT_WORKER_PATH=/nonexistent/ckpt-io-worker;
      exec "$0" context-fails 2 "rank 1"' "$exchange" ;;
  request-stats)      # each rank's figures, progress and log lines count its own bytes
    run 3 "$async" request-stats "$ck" ;;
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
  mismatched-collectives)  # rank 0 saves while the others load: CKPT_E_MISMATCH everywhere, then in step again
    run 3 "$control" save-rows "$ck"
    run 3 "$control" mismatched-collectives "$ck" ;;
  rank0-dies-mid-save)  # its temporary directory stays, unclaimed, until the next save to the path removes it
    run 3 "$control" rank0-dies-mid-save "$ck"
    [ "$(ls -d "$ck".tmp-* 2>/dev/null | wc -l)" = 1 ] || { echo "expected one temporary left by rank 0" >&2; exit 1; }
    run 2 "$control" save-rows "$ck"
    if ls -d "$ck".tmp-* 2>/dev/null; then echo "the next save left the dead save's temporary" >&2; exit 1; fi
    test -f "$ck/MANIFEST" ;;
  manager-rank0-dies)   # the same under a manager: opening the root again removes it
    root="$work/root"
    run 3 "$control" manager-rank0-dies "$root"
    [ "$(ls -d "$root"/step-000000000007.tmp-* 2>/dev/null | wc -l)" = 1 ] || { echo "expected step 7's temporary" >&2; exit 1; }
    run 2 "$control" manager-resume "$root"
    if ls -d "$root"/step-*.tmp-* 2>/dev/null; then echo "the manager left the dead save's temporary" >&2; exit 1; fi
    test -f "$root/step-000000000008/MANIFEST" ;;
  stopped-peer)         # a stopped (not dead) rank: the others time out once, naming it
    run 3 "$control" save-rows "$ck"
    rc=0
    out=$(CKPT_TIMEOUT_MS=3000 "$launch" -n 3 --grace 30 --timeout 60 -- "$control" stopped-peer "$ck" 2>&1) || rc=$?
    echo "$out"
    # The stopped rank is killed by rank 0 at the end (137); the others must have passed their checks.
    [ "$rc" = 137 ] || { echo "expected the stopped rank to be killed (137), got $rc" >&2; exit 1; }
    [ "$(echo "$out" | grep -c "timed out after")" = 2 ] || { echo "not every rank reported the timeout" >&2; exit 1; } ;;
  launchers-store-port)  # torchrun's store holds MASTER_PORT: ckpt's store takes the next port, beside it
    # The holder listens on a port whose successor is free, and prints it. Both lie below the kernel's ephemeral
    # range, as the launcher's own do: a successor in that range can be given to another test's connection before
    # the store binds it.
    python3 -c 'import random, socket, time
first_ephemeral = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
while True:
    held, after = socket.socket(), socket.socket()
    port = random.randrange(10000, first_ephemeral - 1)
    try:
        held.bind(("127.0.0.1", port))
        after.bind(("127.0.0.1", port + 1))
    except OSError:
        held.close(); after.close()
        continue
    after.close(); held.listen(); print(port, flush=True); time.sleep(60)' > "$work/port" &
    holder=$!
    trap 'kill $holder 2>/dev/null' EXIT
    until [ -s "$work/port" ]; do sleep 0.1; done
    "$launch" -n 2 --port "$(cat "$work/port")" --timeout 60 -- "$control" save-rows "$ck"
    test -f "$ck/MANIFEST" ;;
  launchers-mpich)       # PMI_RANK/PMI_SIZE (MPICH, Intel MPI): one 2-rank job, not two 1-rank jobs
    "$launch" -n 2 --timeout 60 -- sh -c 'export PMI_RANK=$RANK PMI_SIZE=$WORLD_SIZE MPI_LOCALRANKID=$LOCAL_RANK
      unset RANK WORLD_SIZE LOCAL_RANK; exec "$0" save-rows "$1"' "$control" "$ck"
    "$control" check-world "$ck" 2 ;;
  launchers-slurm)       # SLURM without MASTER_ADDR or MASTER_PORT: rank 0's node from the node list
    "$launch" -n 2 --timeout 60 -- sh -c 'export SLURM_PROCID=$RANK SLURM_NTASKS=$WORLD_SIZE SLURM_LOCALID=$LOCAL_RANK
      export SLURM_JOB_ID=$MASTER_PORT SLURM_JOB_NODELIST="localhost,node[2-3]"
      unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT CKPT_STORE_PORT; exec "$0" save-rows "$1"' \
      "$control" "$ck"
    "$control" check-world "$ck" 2 ;;
  io-error)           # a test build's fault hook fails step 2's writes with EIO
    CKPT_FAULT_EIO_PATH=step-000000000002.tmp- run 2 "$async" io-error "$ck" ;;
  short-transfers)    # a test build's fault hook cuts every read and write after 4 KiB: each is resumed until whole
    export CKPT_FAULT_SHORT_TRANSFER_BYTES=4096
    run 2 "$core" save-replicated "$ck"
    run 3 "$exchange" load-replicated "$ck" ;;
  *) echo "unknown scenario $name" >&2; exit 2 ;;
esac
echo "scenario $name: PASS"
