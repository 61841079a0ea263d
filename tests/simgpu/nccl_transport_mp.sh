#!/usr/bin/env bash
# ckpt's NCCL transport on 3 rank processes under the GPU simulator: nccl_transport_mp.sh LAUNCH PROGRAM
# (run_under_simgpu.sh puts the simulator on LD_LIBRARY_PATH first). Every mode must print OK on each surviving rank.
set -euo pipefail
launch=$1 program=$2
run_mode() {
  local mode=$1 survivors=$2 out rc=0
  out=$("$launch" -n 3 --timeout 90 --grace 5 -- "$program" "$mode" 2>&1) || rc=$?
  echo "== $mode (exit $rc)"
  echo "$out"
  [ "$rc" = 0 ] || { echo "nccl_transport_mp.sh: $mode failed" >&2; exit 1; }
  local oks
  oks=$(echo "$out" | grep -c ": OK" || true)
  [ "$oks" = "$survivors" ] || { echo "nccl_transport_mp.sh: $mode: $oks ranks said OK, expected $survivors" >&2; exit 1; }
}
run_mode exchange 3
run_mode peer-exits 2
run_mode peer-exits-no-check 2
