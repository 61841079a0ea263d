#!/usr/bin/env bash
# A 2-rank job on two hosts, as srun starts it: SLURM's variables only (no MASTER_ADDR, no MASTER_PORT), the
# hosts being network namespaces of this machine with their own addresses on a veth pair. Rank 0's host is the first
# of the node list; the store's port comes from the job id. Then the checkpoint is loaded back the same way.
# Usage: slurm_two_hosts.sh PROGRAM WORKDIR   (PROGRAM: ckpt_scenario_control). Needs root; skips (77) without.
set -euo pipefail
program=$1 work=$2
rm -rf "$work" && mkdir -p "$work"

suffix=$$
net=$((suffix % 200 + 20))
hosts=("ckpt-h0-$suffix" "ckpt-h1-$suffix")
addresses=("10.231.$net.1" "10.231.$net.2")
cleanup() { for h in "${hosts[@]}"; do ip netns del "$h" 2>/dev/null || true; done; }
trap cleanup EXIT
if ! ip netns add "${hosts[0]}" 2>/dev/null; then
  echo "SKIP: cannot create network namespaces here (needs root)"
  exit 77
fi
ip netns add "${hosts[1]}"
ip link add "v0-$suffix" netns "${hosts[0]}" type veth peer name "v1-$suffix" netns "${hosts[1]}"
for i in 0 1; do
  ip -n "${hosts[$i]}" link set lo up
  ip -n "${hosts[$i]}" addr add "${addresses[$i]}/24" dev "v$i-$suffix"
  ip -n "${hosts[$i]}" link set "v$i-$suffix" up
done

secret=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
job_id=$((suffix % 9000 + 100))
run_job() {  # MODE: both ranks, each on its host, with what srun would give them
  local mode=$1 pids=() rc=0
  for rank in 0 1; do
    ip netns exec "${hosts[$rank]}" env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u MASTER_ADDR -u MASTER_PORT \
      -u CKPT_STORE_PORT SLURM_PROCID=$rank SLURM_NTASKS=2 SLURM_LOCALID=0 SLURM_JOB_ID=$job_id \
      SLURM_JOB_NODELIST="${addresses[0]},${addresses[1]}" CKPT_NODE_NAME="${hosts[$rank]}" \
      CKPT_JOB_SECRET="$secret" CKPT_TIMEOUT_MS=30000 timeout 60 "$program" "$mode" "$work/ckpt" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
  return $rc
}
run_job save-rows
"$program" check-world "$work/ckpt" 2
run_job load-rows
echo "slurm job on two hosts: PASS"
