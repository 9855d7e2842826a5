#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for trying the sweep scripts (scripts/slurm/) and for
# the test that submits a real array sweep (tests/cli/slurm_cluster_test.cpp). Everything it makes
# lives in one directory: its own slurm.conf, munge key, sockets, state, spool, logs and pid files.
# It touches nothing in /etc and talks to no other Slurm or munge daemon.
#
#   scripts/slurm/test-cluster.sh start DIR [PID]   # munged, slurmctld, slurmd; waits until the node is idle
#   eval "$(scripts/slurm/test-cluster.sh env DIR)"   # SLURM_CONF for sbatch, squeue, sinfo, scontrol
#   scripts/slurm/test-cluster.sh stop DIR    # stops the daemons it started, removes DIR
#
# With PID, a watcher stops the cluster when process PID ends, however it ends (a test that
# crashed or was killed for its time leaves no daemon behind).
# start exits 77 (and says why on stderr) when this machine cannot run the cluster: slurmctld,
# slurmd or munged not installed (scripts/setup.sh installs them), or a daemon that does not come
# up (its log is printed). Needs root (the jobs run as the submitting user, root here; SlurmUser=root).
# The daemons: munged (its own key and socket), slurmctld -D and slurmd -D in the background on two
# free TCP ports, with proctrack/linuxproc and task/none (no cgroup plugin: the machine may have no
# writable cgroup hierarchy). The node has this machine's CPU count and 90% of its memory.
set -euo pipefail

usage() { echo "usage: $0 start DIR [PID] | env DIR | stop DIR" >&2; exit 2; }
[ $# -eq 2 ] || { [ $# -eq 3 ] && { [ "$1" = start ] || [ "$1" = watch ]; }; } || usage
cmd=$1
dir=$2
owner=${3:-}

skip() { echo "test-cluster: cannot run a Slurm cluster here: $*" >&2; exit 77; }

# Two distinct free TCP ports (both held open while the kernel picks them).
free_ports() {
  python3 -c 'import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))'
}

write_conf() {
  local host=$1 cpus mem_mb ports
  cpus=$(nproc)
  read -r -a ports <<< "$(free_ports)"
  mem_mb=$(awk '/^MemTotal:/ { printf "%d", $2 / 1024 * 0.9 }' /proc/meminfo)
  cat > "$dir/slurm.conf" <<CONF
# Written by scripts/slurm/test-cluster.sh: a one-node cluster for driftgate's sweep test.
ClusterName=driftgate-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=${ports[0]}
SlurmdPort=${ports[1]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=600
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=sweep Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
}

start_munge() {
  mkdir -p "$dir/munge"
  chmod 700 "$dir/munge"
  if command -v mungekey >/dev/null; then
    mungekey --create --keyfile="$dir/munge/munge.key" --force
  else
    dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  fi
  chmod 400 "$dir/munge/munge.key"
  munged --force --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/munged.seed" \
    || { cat "$dir/munge/munged.log" >&2 || true; skip "munged did not start"; }
}

# Starts one daemon in the foreground mode (-D) in the background; its pid goes to DIR/NAME.started.
start_daemon() {
  local name=$1
  shift
  "$@" > "$dir/$name.out" 2>&1 &
  echo $! > "$dir/$name.started"
}

# Waits up to 30 s until sinfo shows the node idle.
wait_idle() {
  local state name
  for _ in $(seq 1 60); do
    state=$(SLURM_CONF=$dir/slurm.conf sinfo -h -N -o '%t' 2>/dev/null || true)
    [ "$state" = idle ] && return 0
    for name in slurmctld slurmd; do
      kill -0 "$(cat "$dir/$name.started")" 2>/dev/null || {
        cat "$dir/$name.out" "$dir/$name.log" >&2 2>/dev/null || true
        return 1
      }
    done
    sleep 0.5
  done
  echo "test-cluster: node state after 30 s: '$state'" >&2
  return 1
}

start() {
  for tool in munged slurmctld slurmd sbatch sinfo; do
    command -v "$tool" >/dev/null || skip "$tool is not installed (scripts/setup.sh installs munge, slurmctld, slurmd, slurm-client)"
  done
  [ "$(id -u)" -eq 0 ] || skip "the test cluster runs its daemons as root (SlurmUser=root); run as root"
  [ ! -e "$dir/slurm.conf" ] || { echo "test-cluster: $dir already holds a cluster; stop it first" >&2; exit 2; }
  mkdir -p "$dir/state" "$dir/spool"
  dir=$(cd "$dir" && pwd)
  [ ${#dir} -le 80 ] || skip "$dir is too long a path for the munge socket (at most 80 characters)"
  local host
  host=$(hostname -s)
  write_conf "$host"
  start_munge
  start_daemon slurmctld slurmctld -D -c -f "$dir/slurm.conf"
  start_daemon slurmd slurmd -D -f "$dir/slurm.conf" -N "$host"
  if ! wait_idle; then
    stop
    skip "slurmctld or slurmd did not come up (logs above)"
  fi
  if [ -n "$owner" ]; then
    setsid bash "$0" watch "$dir" "$owner" < /dev/null > /dev/null 2>&1 &
    echo $! > "$dir/watch.started"
  fi
  echo "test-cluster: node $host idle; SLURM_CONF=$dir/slurm.conf"
}

# The watcher: stops the cluster once process $owner is gone (or DIR was removed by stop).
watch() {
  while kill -0 "$owner" 2>/dev/null && [ -f "$dir/slurm.conf" ]; do sleep 1; done
  stop
}

# Stops, by the pids it recorded, every daemon start started, then removes DIR.
stop() {
  [ -d "$dir" ] || return 0
  local name pid
  if [ -f "$dir/watch.started" ] && [ "$(cat "$dir/watch.started")" != "$$" ]; then
    kill "$(cat "$dir/watch.started")" 2>/dev/null || true
  fi
  # Jobs first, so that no job step outlives its slurmd.
  SLURM_CONF=$dir/slurm.conf timeout 10 scancel --full --user "$(id -un)" >/dev/null 2>&1 || true
  local pids=()
  for name in slurmd slurmctld; do
    if [ -f "$dir/$name.started" ]; then pids+=("$(cat "$dir/$name.started")"); fi
  done
  # Both at once (each takes a second or two to shut down), then at most 5 s before SIGKILL.
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -9 "$pid" 2>/dev/null || true
  done
  if [ -f "$dir/munge/munged.pid" ]; then
    munged --stop --socket="$dir/munge/munge.socket" >/dev/null 2>&1 || kill "$(cat "$dir/munge/munged.pid")" 2>/dev/null || true
  fi
  rm -rf "$dir"
}

case $cmd in
  start) start ;;
  watch) watch ;;
  env)
    [ -f "$dir/slurm.conf" ] || { echo "test-cluster: no cluster in $dir (start one first)" >&2; exit 2; }
    echo "export SLURM_CONF=$(cd "$dir" && pwd)/slurm.conf"
    ;;
  stop) stop ;;
  *) usage ;;
esac
