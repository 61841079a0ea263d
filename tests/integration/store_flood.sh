#!/usr/bin/env bash
# A job that starts while strangers flood its store: tests/integration/store_flood.sh LAUNCH PROGRAM WORKDIR
# A flooder opens 1,000 connections to the store's port as soon as rank 0 listens, from the ranks' own address and
# from another loopback address (idle ones, ones trickling a frame that never ends, ones sending garbage), and
# holds them until the job is over; the other ranks join once it is under way. The 4-rank job (PROGRAM is
# ckpt_scenario_control) must start and save all the same: strangers can delay ranks a little
# (collectives/store/store_strangers.h) but never fail them.
set -euo pipefail
launch=$1 control=$2 work=$3
rm -rf "$work" && mkdir -p "$work"

# A port whose successor (the store's, with --port) is free too, below the kernel's ephemeral range.
port=$(python3 -c 'import random, socket
first_ephemeral = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
while True:
    port = random.randrange(10000, first_ephemeral - 1)
    try:
        for p in (port, port + 1):
            with socket.socket() as s:
                s.bind(("127.0.0.1", p))
    except OSError:
        continue
    print(port)
    break')

python3 - "$((port + 1))" "$work/flood" <<'EOF' &
import os, socket, sys, time
port, report = int(sys.argv[1]), sys.argv[2]
held, slow = [], []
give_up = time.monotonic() + 60
while len(held) < 1000 and time.monotonic() < give_up:
    s = socket.socket()
    s.bind(("127.0.0.%d" % (1 + len(held) % 2), 0))
    try:
        s.connect(("127.0.0.1", port))
    except OSError:
        s.close()
        time.sleep(0.005)
        continue
    kind = len(held) % 3
    if kind == 1:
        slow.append(s)
    elif kind == 2:
        s.send(b"GET / HTTP/1.1\r\nHost: ckpt\r\n\r\n")
    held.append(s)
    if len(held) % 50 == 0:
        with open(report + ".tmp", "w") as f:
            f.write("%d\n" % len(held))
        os.replace(report + ".tmp", report)
# A hello's header, then its payload a byte at a time: a frame that never ends.
for byte in bytes([1, 0, 0, 0, 200, 0, 0, 0, 0, 0, 0, 0]) + b"x" * 1000:
    for s in slow:
        try:
            s.send(bytes([byte]))
        except OSError:
            pass
    time.sleep(0.02)
EOF
flooder=$!
trap 'kill $flooder 2>/dev/null || true' EXIT

started=$(date +%s)
# Rank 0 listens first (the flood needs its port); the others join once the flood is under way, or after 20 s.
"$launch" -n 4 --port "$port" --timeout 60 -- sh -c '
  if [ "$RANK" != 0 ]; then
    for _ in $(seq 400); do [ "$(cat "$2" 2>/dev/null || echo 0)" -ge 100 ] && break; sleep 0.05; done
  fi
  exec "$0" save-rows "$1"' "$control" "$work/ckpt" "$work/flood"
test -f "$work/ckpt/MANIFEST"
opened=$(cat "$work/flood" 2>/dev/null || echo 0)
echo "the job started and saved in $(($(date +%s) - started)) s; the flooder had opened $opened connections"
[ "$opened" -ge 100 ] || { echo "the flooder opened only $opened connections: no flood to speak of" >&2; exit 1; }
