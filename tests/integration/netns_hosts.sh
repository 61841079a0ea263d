# Hosts made of network namespaces, for the multi-host tests; sourced (bash), not run. Each host is a namespace with
# its own address on one Linux bridge, which lives in a namespace of its own (the switch), so that the tests touch
# nothing of this machine's own network and parallel runs cannot meet: every name carries the caller's pid.
#
#   hosts_switch PREFIX             makes the switch's namespace; fails when namespaces cannot be made here (not root)
#   hosts_create PREFIX COUNT NET   its bridge, and hosts PREFIX-h0.. with addresses NET.1, NET.2, .. (NET: "10.232.7")
#   hosts_prefix I                  sets HOST_PREFIX to the command prefix that runs a command on host I
#   hosts_rx_bytes I                bytes host I has received on its link so far
#   hosts_cut I                     cuts host I's link at the switch (its cable pulled: the host sees no carrier)
#   hosts_cleanup                   removes every namespace (and with them their links and the bridge)
#   hosts_remove_stale BASE         removes the namespaces BASE-PID-* left by runs whose PID is gone (a run killed
#                                   with SIGKILL, as ctest kills a test past its timeout, runs no trap)
#   job_start NAME LIMIT STORE_HOST PLACEMENT CMD...
#                                   starts one rank per word of PLACEMENT ("0 0 1 1": ranks 0, 1 on host 0, ranks 2, 3
#                                   on host 1), as torchrun would on each host, rank 0's host (STORE_HOST) holding the
#                                   store; each rank is bounded by `timeout LIMIT`, its output in
#                                   $HOSTS_WORK/NAME-rank-R.log; JOB_ENV adds settings
#   job_finish                      waits for the ranks; prints their output; fails if any rank failed, and says so
#                                   loudly if one was killed by the timeout or by a signal
#
# Every host sees a boot id of its own. UCX takes two processes with one boot id for processes of one machine and
# reaches them through shared memory, which network namespaces do not separate: without it, ranks of different hosts
# would talk through /dev/shm and next to no byte would cross the bridge (measured: 15 kB instead of 4.2 MB for
# three_hosts.sh's load). Ranks of one host share the boot id, so they do use
# shared memory, as on a real host.

HOSTS=() HOST_ADDRESSES=() HOST_LINKS=() HOST_PORTS=() HOST_BOOT_IDS=() HOST_PREFIX=()
HOSTS_SWITCH="" HOSTS_WORK="" HOSTS_SECRET=""
HOSTS_MASTER_PORT=29500  # the namespaces are private to the test: no other job can hold it
JOB_ENV=()               # extra NAME=VALUE settings for every rank of the next job
JOB_PIDS=() JOB_NAME=""

hosts_switch() {
  HOSTS_SWITCH="$1-sw"
  ip netns add "$HOSTS_SWITCH" 2>/dev/null
}

hosts_create() {
  local prefix=$1 count=$2 net=$3 i
  HOSTS_SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
  ip -n "$HOSTS_SWITCH" link add br0 type bridge
  ip -n "$HOSTS_SWITCH" link set br0 up
  for ((i = 0; i < count; i++)); do
    HOSTS+=("$prefix-h$i")
    HOST_ADDRESSES+=("$net.$((i + 1))")
    HOST_LINKS+=("eth0")
    HOST_PORTS+=("port$i")
    HOST_BOOT_IDS+=("$HOSTS_WORK/boot-id-$i")
    cat /proc/sys/kernel/random/uuid > "$HOSTS_WORK/boot-id-$i"
    ip netns add "${HOSTS[$i]}"
    ip -n "${HOSTS[$i]}" link set lo up
    ip link add "eth0" netns "${HOSTS[$i]}" type veth peer name "port$i" netns "$HOSTS_SWITCH"
    ip -n "$HOSTS_SWITCH" link set "port$i" master br0 up
    ip -n "${HOSTS[$i]}" addr add "${HOST_ADDRESSES[$i]}/24" dev eth0
    ip -n "${HOSTS[$i]}" link set eth0 up
  done
}

hosts_cleanup() {
  local h
  for h in "${HOSTS[@]}" "$HOSTS_SWITCH"; do [ -n "$h" ] && ip netns del "$h" 2>/dev/null; done
  return 0
}

hosts_remove_stale() {
  local base=$1 name pid
  for name in $(ip netns list 2>/dev/null | awk '{print $1}'); do
    [[ "$name" =~ ^$base-([0-9]+)- ]] || continue
    pid=${BASH_REMATCH[1]}
    [ "$pid" != "$$" ] && ! kill -0 "$pid" 2>/dev/null && ip netns del "$name" 2>/dev/null
  done
  return 0
}

# The command prefix that runs a command on host I, in HOST_PREFIX. `ip netns exec` gives the command a mount
# namespace of its own: the boot id mounted there is seen by it alone.
hosts_prefix() {
  HOST_PREFIX=(ip netns exec "${HOSTS[$1]}" sh -c 'mount --bind "$0" /proc/sys/kernel/random/boot_id && exec "$@"'
    "${HOST_BOOT_IDS[$1]}")
}

hosts_rx_bytes() { ip netns exec "${HOSTS[$1]}" cat "/sys/class/net/${HOST_LINKS[$1]}/statistics/rx_bytes"; }

hosts_cut() { ip -n "$HOSTS_SWITCH" link set "${HOST_PORTS[$1]}" down; }

job_start() {
  local name=$1 limit=$2 store=$3 placement rank host local_rank local_world other
  read -r -a placement <<< "$4"
  shift 4
  JOB_NAME=$name JOB_PIDS=()
  local world=${#placement[@]}
  for ((rank = 0; rank < world; rank++)); do
    host=${placement[$rank]}
    local_rank=0 local_world=0
    for ((other = 0; other < world; other++)); do
      [ "${placement[$other]}" = "$host" ] || continue
      [ "$other" -lt "$rank" ] && local_rank=$((local_rank + 1))
      local_world=$((local_world + 1))
    done
    # Only what torchrun sets on that host: whatever launcher variables this shell has are dropped. Every command
    # execs the next, so that the pid kept is the rank's `timeout`: killing it ends the rank.
    hosts_prefix "$host"
    { exec "${HOST_PREFIX[@]}" env -u SLURM_PROCID -u SLURM_NTASKS -u SLURM_LOCALID -u SLURM_JOB_ID \
      -u SLURM_JOB_NODELIST -u SLURM_STEP_NODELIST -u SLURM_NODELIST -u SLURM_NTASKS_PER_NODE -u OMPI_COMM_WORLD_RANK \
      -u OMPI_COMM_WORLD_SIZE -u OMPI_COMM_WORLD_LOCAL_RANK -u OMPI_COMM_WORLD_LOCAL_SIZE -u PMI_RANK -u PMI_SIZE \
      -u MPI_LOCALRANKID -u CKPT_STORE_PORT RANK=$rank WORLD_SIZE=$world LOCAL_RANK=$local_rank \
      LOCAL_WORLD_SIZE=$local_world MASTER_ADDR="${HOST_ADDRESSES[$store]}" MASTER_PORT=$HOSTS_MASTER_PORT \
      CKPT_NODE_NAME="${HOSTS[$host]}" CKPT_JOB_SECRET="$HOSTS_SECRET" "${JOB_ENV[@]}" \
      timeout "$limit" "$@" > "$HOSTS_WORK/$name-rank-$rank.log" 2>&1; } &
    JOB_PIDS+=($!)
  done
}

job_finish() {
  local rank rc failed=0
  for ((rank = 0; rank < ${#JOB_PIDS[@]}; rank++)); do
    rc=0
    wait "${JOB_PIDS[$rank]}" || rc=$?
    sed "s/^/[$JOB_NAME rank $rank] /" "$HOSTS_WORK/$JOB_NAME-rank-$rank.log"
    if [ "$rc" = 124 ]; then
      echo "$JOB_NAME: rank $rank HUNG: killed by the timeout" >&2
    elif [ "$rc" -gt 128 ]; then
      echo "$JOB_NAME: rank $rank was killed by signal $((rc - 128))" >&2
    elif [ "$rc" != 0 ]; then
      echo "$JOB_NAME: rank $rank exited with status $rc" >&2
    fi
    [ "$rc" = 0 ] || failed=1
  done
  return $failed
}
