#!/usr/bin/env bash
# The memory tier across hosts: each host is a network namespace of this machine (tests/integration/netns_hosts.sh)
# with its own address, its ranks and its own ckpt-agent (started by its first rank), so that replicas and fetches
# between agents cross the bridge over UCX, and persists meet on the shared storage.
# Usage: memory_hosts.sh PART SCENARIO CKPT_CLI WORKDIR (SCENARIO: ckpt_scenario_memory). Needs root; skips (77)
# without.
#
#   crash-persists  4 ranks on 2 hosts save steps 1-3 to memory only and are killed (SIGKILL): the two agents
#                   commit step 3 to storage together, and it verifies; with that copy removed again, the restarted
#                   job on the same hosts restores step 3 from memory, every element checked.
#   node-lost       4 ranks on 2 hosts save steps 1-2 to memory and are killed; host 0's agent is killed and its
#                   memory removed, and the storage copy too. The restarted job, with a fresh host in host 0's place
#                   (rank 0 on it), restores step 2 from memory: the fresh host's agent fetches the MANIFEST from host
#                   1, which holds its own files and host 0's replicas, and the file of rank 0 that holds the common
#                   bytes its ranks read; host 1's ranks read the rest and the load's exchange carries the fresh
#                   host's ranks their shards over its link. The fresh host does not hold every data file.
#   replaced-then-crash
#                   4 ranks on 2 hosts save steps 1-2 to memory only and exit; host 0 is lost. The restarted job, with
#                   a fresh host in host 0's place, restores step 2 from memory, and every rank SIGKILLs itself: the
#                   agents of the fresh host and host 1, told at the restore which files each writes, commit step 2
#                   to storage together, and `ckpt verify` passes.
#   reshard         4 ranks on 2 hosts save to memory; 2 ranks (one per host) restore it from memory.
#   lost-without-replicas
#                   as node-lost, but with CKPT_MEMORY_REPLICAS=0 and the storage copy kept: host 0's files are
#                   nowhere in memory, rank 0 warns naming them, and the job restores step 2 from storage, every
#                   element checked.
#   agent-dies      4 ranks on 2 hosts save step 1; every agent is killed; step 2 fails on every rank naming the
#                   agent; step 3 starts new agents, which learn each other's addresses from the ranks and replicate
#                   it.
#   three-hosts     3 ranks on 3 hosts save steps 1-2 to memory and are killed: the three agents commit step 2 to
#                   storage together. With that copy removed, the restarted job restores step 2 from memory: each
#                   host holds its own files and its ring predecessor's, none the whole checkpoint; only host 2
#                   fetches a file, the one of rank 0's with the common bytes every rank reads. A second job with its
#                   ranks moved one host on ("2 0 1": rank 0 on host 2, which lacks rank 0's other files) restores it
#                   too: other hosts read those files and send the pieces.
#   holder-dies-mid-fetch
#                   3 ranks on 3 hosts save steps 1-2 to memory and are killed: the agents commit step 2. The
#                   restarted job reads step 2 from memory: host 2 lacks host 0's file with the common bytes, and its
#                   agent asks host 0's for it after learning what each holds; host 0's agent dies when asked
#                   (CKPT_FAULT_AGENT_DIES_ON_PUSH_ASK). The fetch fails naming that node, rank 0 warns, and the job
#                   restores step 2 from storage, every element checked.
set -euo pipefail
part=$1 scenario=$2 cli=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
source "$(dirname "$0")/netns_hosts.sh"
HOSTS_WORK=$work
export CKPT_ARENA_BYTES=${CKPT_ARENA_BYTES:-$((64 << 20))}
job_id="memory-hosts-$part-$$"
shm_root="/dev/shm/ckpt-test-hosts-$part-$$"
mkdir -p "$shm_root"
root="$work/steps"
agent_pattern="[c]kpt-agent --job-id $job_id "

stop_agents() {
  pkill -TERM -f -- "$agent_pattern" 2>/dev/null || true
  for _ in $(seq 50); do pgrep -f -- "$agent_pattern" >/dev/null || break; sleep 0.1; done
  pkill -KILL -f -- "$agent_pattern" 2>/dev/null || true
}
cleanup() {
  for pid in "${JOB_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  stop_agents
  rm -rf "$shm_root"
  hosts_cleanup
}
trap cleanup EXIT
trap 'exit 143' TERM INT HUP
hosts_remove_stale ckptmh
if ! hosts_switch "ckptmh-$$"; then
  echo "SKIP: cannot create network namespaces here (needs root)"
  exit 77
fi
hosts_create "ckptmh-$$" 3 "10.233.$(($$ % 200 + 20))"
# The agents wait for the next job of a part however long starting it takes on a loaded machine (the default 2 s
# after a clean end was once too short for "replaced-then-crash" and "three-hosts").
JOB_ENV=(CKPT_JOB_ID="$job_id" CKPT_AGENT_SHM_ROOT="$shm_root" CKPT_AGENT_IDLE_S=60 CKPT_AGENT_LINGER_S=60
  CKPT_AGENT_PERSIST_WAIT_S=30 CKPT_TRANSPORT=ucx)

step_dir() { printf '%s/step-%012d' "$root" "$1"; }
agent_logs() { for log in "$shm_root"/*.log; do echo "== $log"; cat "$log"; done 2>/dev/null || true; }
fail() { echo "$*" >&2; agent_logs >&2; exit 1; }
# The trainers kill themselves after their last save: their exit is the test's intent, not a failure.
train_and_die() {
  job_start "$1" 60 0 "$2" "$scenario" train "$root" "$3" 0 die
  job_finish > "$work/$1.out" 2>&1 || true
  grep -q "trained $3 steps in memory" "$work/$1.out" || { cat "$work/$1.out"; fail "$1: the trainers did not save"; }
}
restore() {
  local name=$1 store=$2 placement=$3 step=$4 tier=${5:-memory}
  job_start "$name" 60 "$store" "$placement" "$scenario" restore "$root" "$step" "$tier"
  job_finish || fail "$name: the restore failed"
}
await_storage() {
  for _ in $(seq 300); do [ -f "$(step_dir "$1")/MANIFEST" ] && return 0; sleep 0.1; done
  fail "step $1 never reached storage"
}
# The log of host $1's agent.
agent_log_of() { grep -l "node '${HOSTS[$1]}'" "$shm_root"/*.log || fail "no log of ${HOSTS[$1]}'s agent"; }
# How many data files host $1's memory copy of step $2 holds.
data_files_of() {
  local dir
  dir=$(agent_log_of "$1") || exit 1
  find "${dir%.log}"/step-"$(printf %012d "$2")"-*/data -name '*.bin' 2>/dev/null | wc -l
}
# Host $1's agent: killed, and the memory it held removed, as when its node is lost.
lose_host() {
  local node=${HOSTS[$1]} log
  pkill -KILL -f -- "$agent_pattern--node $node " || fail "no agent ran on $node"
  log=$(grep -l "node '$node'" "$shm_root"/*.log) || fail "no log of $node's agent"
  rm -rf "${log%.log}"
}

case "$part" in
  crash-persists)
    train_and_die train "0 0 1 1" 3
    for h in 0 1; do
      grep -q "replicated: memory checkpoint 'step-000000000003" "$(agent_log_of $h)" || fail "host $h did not replicate"
    done
    await_storage 3
    "$cli" verify "$(step_dir 3)"
    for s in 1 2; do [ ! -e "$(step_dir "$s")" ] || fail "step $s reached storage"; done
    ls "$root" | grep -q "tmp-" && fail "a temporary directory was left on storage"
    rm -rf "$(step_dir 3)"
    restore restart 0 "0 0 1 1" 3 ;;
  node-lost)
    train_and_die train "0 0 1 1" 2
    await_storage 2
    lose_host 0
    rm -rf "$(step_dir 2)"
    rx_before=$(hosts_rx_bytes 2)
    restore replaced 2 "2 2 1 1" 2
    grep -q "fetched: memory checkpoint 'step-000000000002" "$(agent_log_of 2)" || fail "host 2 fetched nothing"
    # Host 1 holds every data file (its own and host 0's replicas); the fresh host only the one it reads alone.
    [ "$(data_files_of 2 2)" -lt "$(data_files_of 1 2)" ] || fail "host 2 fetched every data file"
    # Ranks 0 and 1 load 260 kB each, which reached the fresh host over its link (UCX, not shared memory).
    [ $(($(hosts_rx_bytes 2) - rx_before)) -ge 500000 ] || fail "host 2 received too little over its link" ;;
  replaced-then-crash)
    job_start train 60 0 "0 0 1 1" "$scenario" train "$root" 2 0 exit
    job_finish > "$work/train.out" 2>&1 || { cat "$work/train.out"; fail "train: the trainers failed"; }
    [ ! -e "$(step_dir 2)" ] || fail "step 2 reached storage before the crash"
    lose_host 0
    job_start replaced 60 2 "2 2 1 1" "$scenario" restore "$root" 2 memory die
    job_finish > "$work/replaced.out" 2>&1 || true
    grep -q "restored step 2 on 4 ranks from memory" "$work/replaced.out" ||
      { cat "$work/replaced.out"; fail "replaced: the restore failed"; }
    for h in 1 2; do
      grep -q "reassigned: memory checkpoint 'step-000000000002" "$(agent_log_of $h)" ||
        fail "host $h's agent was not told how this job persists step 2"
    done
    await_storage 2
    "$cli" verify "$(step_dir 2)"
    ! ls "$root" | grep -q "tmp-" || fail "a temporary directory was left on storage"
    grep -q "persist finished: 'step-000000000002" "$(agent_log_of 2)" || fail "host 2's agent did not commit step 2" ;;
  reshard)
    train_and_die train "0 0 1 1" 2
    await_storage 2
    rm -rf "$(step_dir 2)"
    restore fewer 0 "0 1" 2 ;;
  lost-without-replicas)
    JOB_ENV+=(CKPT_MEMORY_REPLICAS=0 CKPT_LOG_LEVEL=info)
    train_and_die train "0 0 1 1" 2
    await_storage 2
    lose_host 0
    restore replaced 2 "2 2 1 1" 2 storage > "$work/replaced.out" 2>&1 || { cat "$work/replaced.out"; exit 1; }
    # Host 1 holds its own files only, the fresh host the MANIFEST: host 0's three files are in no memory.
    grep -q "from storage: the memory tier: no node holds 3 of the 5 data files in memory ('data/0-0.bin'" \
      "$work/replaced.out" || { cat "$work/replaced.out"; fail "rank 0 did not warn naming the files no node holds"; } ;;
  agent-dies)
    job_start dies 60 0 "0 0 1 1" "$scenario" agent-dies "$root"
    job_finish > "$work/dies.out" 2>&1 || true
    grep -q "step 3 saved with a new one" "$work/dies.out" || { cat "$work/dies.out"; fail "step 3 did not save"; }
    for h in 0 1; do
      grep -q "replicated: memory checkpoint 'step-000000000003" "$(agent_log_of $h)" ||
        fail "host $h's new agent did not replicate step 3"
    done
    if grep -q "replicas of memory checkpoint\|replicating '" "$work/dies.out"; then
      cat "$work/dies.out"
      fail "a rank warned about replicas"
    fi ;;
  three-hosts)
    train_and_die train "0 1 2" 2
    await_storage 2
    "$cli" verify "$(step_dir 2)"
    saved_files=$(find "$(step_dir 2)/data" -name '*.bin' | wc -l)
    rm -rf "$(step_dir 2)"
    restore restart 0 "0 1 2" 2
    rx_before=$(hosts_rx_bytes 2)
    restore moved 2 "2 0 1" 2
    # Rank 0's 344 kB came to host 2 over its link: host 2 holds ranks 1's and 2's files, not rank 0's.
    [ $(($(hosts_rx_bytes 2) - rx_before)) -ge 300000 ] || fail "host 2 received too little over its link"
    for h in 0 1; do
      ! grep -q "fetched" "$(agent_log_of $h)" || fail "host $h fetched files, though it holds all it reads alone"
    done
    grep -q "fetched 'step-000000000002" "$(agent_log_of 2)" ||
      fail "host 2 fetched nothing, though it lacks rank 0's file with the common bytes"
    for h in 0 1 2; do
      [ "$(data_files_of $h 2)" -lt "$saved_files" ] || fail "host $h holds every one of the $saved_files data files"
    done ;;
  holder-dies-mid-fetch)
    JOB_ENV+=(CKPT_FAULT_AGENT_DIES_ON_PUSH_ASK="${HOSTS[0]}" CKPT_LOG_LEVEL=info)
    train_and_die train "0 1 2" 2
    await_storage 2
    restore restart 0 "0 1 2" 2 storage > "$work/restart.out" 2>&1 || { cat "$work/restart.out"; exit 1; }
    grep -q "from storage: the memory tier: .*node '${HOSTS[0]}'" "$work/restart.out" ||
      { cat "$work/restart.out"; fail "rank 0 did not warn naming the node whose agent died"; }
    ! pgrep -f -- "$agent_pattern--node ${HOSTS[0]} " >/dev/null || fail "host 0's agent did not die when asked" ;;
  *) echo "unknown part $part" >&2; exit 2 ;;
esac
echo "memory_hosts $part: passed"
