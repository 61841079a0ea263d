#!/usr/bin/env bash
# The memory tier with real rank processes and a real ckpt-agent: memory_tier.sh NAME LAUNCH SCENARIO CLI WORKDIR
# (SCENARIO: ckpt_scenario_memory, whose modes are listed at the top of its source; CLI: the ckpt tool). Each run
# has a job identity and a memory root of its own, and stops its agent whatever happens.
set -euo pipefail
name=$1 launch=$2 scenario=$3 cli=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
root="$work/steps"
export CKPT_JOB_ID="memory-tier-$name-$$"
export CKPT_AGENT_SHM_ROOT="/dev/shm/ckpt-test-$name-$$"
export CKPT_AGENT_IDLE_S=60
mkdir -p "$CKPT_AGENT_SHM_ROOT"

stop_agent() {
  pkill -TERM -f -- "ckpt-agent --job-id $CKPT_JOB_ID " 2>/dev/null || true
  for _ in $(seq 50); do pgrep -f -- "ckpt-agent --job-id $CKPT_JOB_ID " >/dev/null || break; sleep 0.1; done
  pkill -KILL -f -- "ckpt-agent --job-id $CKPT_JOB_ID " 2>/dev/null || true
  rm -rf "$CKPT_AGENT_SHM_ROOT"
}
trap stop_agent EXIT

run() { local n=$1; shift; "$launch" -n "$n" --timeout 60 -- "$scenario" "$@"; }
# The trainers kill themselves: the launcher reports the signal, which is what the test wants.
run_dying() { local n=$1; shift; "$launch" -n "$n" --timeout 60 -- "$scenario" "$@" || true; }
step_dir() { printf '%s/step-%012d' "$root" "$1"; }
# Waits until step $1 is committed on storage, written there by the agent.
await_storage() {
  local dir
  dir=$(step_dir "$1")
  for _ in $(seq 200); do [ -f "$dir/MANIFEST" ] && return 0; sleep 0.1; done
  echo "step $1 never reached storage; the agent's log:" >&2
  cat "$CKPT_AGENT_SHM_ROOT"/*.log >&2 || true
  return 1
}
agent_log() { cat "$CKPT_AGENT_SHM_ROOT"/*.log 2>/dev/null || true; }

case "$name" in
  crash-persists)  # SIGKILL of every trainer after its last save to memory: the agent commits it to storage
    run_dying 4 train "$root" 3 0 die
    await_storage 3
    "$cli" verify "$(step_dir 3)"
    for s in 1 2; do [ ! -e "$(step_dir "$s")" ] || { echo "step $s reached storage" >&2; exit 1; }; done
    ls "$root" | grep -q "tmp-" && { echo "a temporary directory was left on storage" >&2; exit 1; }
    run 4 restore "$root" 3 memory ;;
  in-place-persists)  # saves written in place into the agent's memory; the trainers' death persists the last one
    run_dying 3 train "$root" 2 0 die-in-place
    await_storage 2
    "$cli" verify "$(step_dir 2)"
    rm -rf "$(step_dir 2)"
    run 2 restore "$root" 2 memory ;;
  restart-from-memory)  # the restarted job reads nothing from storage: its copy there is removed first
    run_dying 2 train "$root" 2 0 die
    await_storage 2
    rm -rf "$(step_dir 2)"
    run 2 restore "$root" 2 memory ;;
  reshard-from-memory)  # restore from memory into another number of ranks: 4 -> 2, and 2 -> 3
    run_dying 4 train "$root" 2 0 die
    await_storage 2
    rm -rf "$(step_dir 2)"
    run 2 restore "$root" 2 memory
    export CKPT_JOB_ID="$CKPT_JOB_ID-b"
    root="$work/steps-b"
    run_dying 2 train "$root" 1 0 die
    await_storage 1
    rm -rf "$(step_dir 1)"
    run 3 restore "$root" 1 memory ;;
  crash-mid-save)  # killed right after the last save returned: the newest complete step reaches storage, intact
    run_dying 3 train "$root" 4 0 die-unwaited
    persisted=""
    for _ in $(seq 200); do
      for s in 4 3; do [ -f "$(step_dir $s)/MANIFEST" ] && { persisted=$s; break 2; }; done
      sleep 0.1
    done
    [ -n "$persisted" ] || { echo "no step reached storage"; agent_log; exit 1; } >&2
    "$cli" verify "$(step_dir "$persisted")"
    stop_agent
    run 3 restore "$root" "$persisted" storage ;;
  storage-every)  # memory every step, storage every 2: the agent writes steps 2 and 4; a clean exit ends the agent
    run 2 train "$root" 5 2 exit
    await_storage 4
    "$cli" verify "$(step_dir 2)"
    "$cli" verify "$(step_dir 4)"
    for s in 1 3 5; do [ ! -e "$(step_dir "$s")" ] || { echo "step $s reached storage" >&2; exit 1; }; done
    [ "$(cat "$root/latest")" = "step-000000000004" ] || { echo "latest is not step 4" >&2; exit 1; }
    for _ in $(seq 100); do pgrep -f -- "ckpt-agent --job-id $CKPT_JOB_ID " >/dev/null || break; sleep 0.1; done
    pgrep -f -- "ckpt-agent --job-id $CKPT_JOB_ID " >/dev/null && { echo "the agent outlived its job" >&2; exit 1; }
    run 2 restore "$root" 4 storage ;;
  agent-dies)  # the agent is killed between two saves: the next save fails clearly, the one after starts a new
    # agent, which adopts the memory of the dead one; the trainers' death then persists the newest step
    out=$(run_dying 2 agent-dies "$root" 2>&1)
    echo "$out"
    grep -q "step 3 saved with a new one" <<<"$out" || { echo "the job did not get past the agent's death" >&2; exit 1; }
    await_storage 3
    "$cli" verify "$(step_dir 3)"
    [ ! -e "$(step_dir 2)" ] || { echo "the failed step 2 reached storage" >&2; exit 1; }
    run 2 restore "$root" 3 memory ;;
  writes-after-staging)  # a memory save's copies into the agent start once staging ends; the save stays whole
    out=$(CKPT_FAULT_STAGING_PAUSE_MS=300 run_dying 2 writes-after-staging "$root" 2>&1)
    echo "$out"
    grep -q "memory saves write after staging" <<<"$out" || { echo "the save was not checked" >&2; exit 1; }
    await_storage 1
    rm -rf "$(step_dir 1)"
    run 2 restore "$root" 1 memory ;;
  recycles)  # a memory save writes over the files of the step before last instead of filling fresh memory
    out=$(run_dying 2 recycles "$root" 2>&1)
    echo "$out"
    grep -q "step 3 was written into the files of step 1" <<<"$out" || { echo "the files were not checked" >&2; exit 1; }
    await_storage 3
    rm -rf "$(step_dir 3)"
    run 2 restore "$root" 3 memory ;;
  larger-than-arena)  # a memory save the staging arena cannot hold at once streams through it, and reads back whole
    CKPT_ARENA_BYTES=$((64 << 20)) run 2 larger-than-arena "$root" ;;
  over-budget)  # a save past the agent's budget fails on every rank and leaves nothing anywhere
    export CKPT_AGENT_BUDGET_BYTES=65536
    run 2 over-budget "$work/ck"
    [ ! -e "$work/ck" ] || { echo "the refused save reached storage" >&2; exit 1; } ;;
  impostor-directory|impostor-listens)  # another user holds the agent's address before the job's first save to
    # memory: in a socket directory it made first, or listening where the agent would. The 2-rank job fails naming
    # it, the impostor receives no byte, and nothing is written into the memory directory it would have named.
    [ "$(id -u)" = 0 ] || { echo "SKIP: needs root to pose as another user"; exit 77; }
    export CKPT_NODE_NAME=impostor-node
    public=$(mktemp -d /tmp/ckpt-impostor-XXXXXX)
    chmod 1777 "$public"
    theirs="$CKPT_AGENT_SHM_ROOT/theirs"
    mkdir -m 777 "$theirs"
    if [ "$name" = impostor-directory ]; then
      export CKPT_AGENT_SOCKET_DIR="$public/sockets" expected="belongs to uid 65534"
      python3 "$(dirname "$0")/agent_impostor.py" directory "$CKPT_AGENT_SOCKET_DIR" "$CKPT_JOB_ID" \
        "$CKPT_NODE_NAME" "$public/record" &
    else
      export CKPT_AGENT_SOCKET_DIR="$CKPT_AGENT_SHM_ROOT/sockets"
      mkdir -m 700 "$CKPT_AGENT_SOCKET_DIR"
      python3 "$(dirname "$0")/agent_impostor.py" listens "$CKPT_AGENT_SOCKET_DIR" "$CKPT_JOB_ID" \
        "$CKPT_NODE_NAME" "$public/record" &
      expected="(pid $!, uid 65534) is not this user's"
    fi
    impostor=$!
    trap 'kill $impostor 2>/dev/null || true; rm -rf "$public"; stop_agent' EXIT
    for _ in $(seq 100); do [ -s "$public/record" ] && break; sleep 0.1; done
    [ -s "$public/record" ] || { echo "the impostor did not start" >&2; exit 1; }
    if out=$(run 2 train "$root" 1 0 exit 2>&1); then
      echo "$out"; echo "the job ran with an impostor as its agent" >&2; exit 1
    fi
    echo "$out"
    [ "$(grep -cF -- "$expected" <<<"$out")" -ge 2 ] || { echo "not every rank named the impostor" >&2; exit 1; }
    read -r _ connections _ bytes < "$public/record"
    echo "the impostor: $connections connections, $bytes bytes"
    [ "$bytes" = 0 ] || { echo "the impostor received $bytes bytes" >&2; exit 1; }
    if [ "$name" = impostor-listens ] && [ "$connections" = 0 ]; then
      echo "no rank reached the impostor: the test proves nothing" >&2; exit 1
    fi
    [ -z "$(ls -A "$theirs")" ] || { echo "something was written into the impostor's directory" >&2; exit 1; }
    ! ls "$root" 2>/dev/null | grep -q step- || { echo "the failed save reached storage" >&2; exit 1; } ;;
  *) echo "unknown memory tier test '$name'" >&2; exit 2 ;;
esac
