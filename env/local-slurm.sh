#!/usr/bin/env bash
# A real single-node SLURM on localhost (ARCHITECTURE.md §13): munged as user munge with its own key,
# slurmctld and slurmd as root, proctrack/linuxproc, task/none, select/cons_tres, MpiDefault=pmix,
# one node with this machine's CPUs and memory. Every file it writes (config, key, sockets, state,
# spool, logs, pid files) lies under $FNVLP_SLURM_DIR (default /var/tmp/fnvlp-slurm).
#
# FNVLP_SLURM_NODES=N (N > 1) starts a separate N-node cluster on this one machine instead: each
# node is a slurmd in its own network and UTS namespace (ip netns fnvlp-nI, hostname fnvlp-nI,
# address 10.77.0.(10+I)), joined by veth pairs to a bridge fnvlp-br0 (10.77.0.1) on which
# slurmctld listens (port 6827, so the single-node cluster can run beside it). Ranks on different
# nodes see different hostnames and talk over TCP between the namespaces, as on real hosts; each
# node has its own /tmp ($FNVLP_SLURM_DIR/tmp/fnvlp-nI), so files jobs share must lie elsewhere.
# Its files lie under $FNVLP_SLURM_DIR (default /var/tmp/fnvlp-slurm-Nn); stop removes the
# namespaces, the veth pairs and the bridge.
#
#   env/local-slurm.sh start    start what is not running; reuse a healthy cluster (idempotent)
#                               after a crash (daemons gone without `stop`: a killed session, a
#                               reboot) it cancels the jobs the dead cluster left unfinished
#   env/local-slurm.sh stop     stop the daemons this script started (idempotent)
#   env/local-slurm.sh status   exit 0 when the controller answers and the node takes jobs
#   env/local-slurm.sh env      print the export line clients need (SLURM_CONF)
#
# Clients (sbatch, squeue, srun) find the config through SLURM_CONF; slurm/common.sh sets it
# when /etc/slurm/slurm.conf is absent, and `eval "$(env/local-slurm.sh env)"` does it by hand.
set -euo pipefail
nodes=${FNVLP_SLURM_NODES:-1}
case "$nodes" in
  [1-9]) ;;
  *)
    echo "local-slurm: error: FNVLP_SLURM_NODES=$nodes: expected 1 to 9" >&2
    exit 2
    ;;
esac
if [ "$nodes" -eq 1 ]; then
  dir=${FNVLP_SLURM_DIR:-/var/tmp/fnvlp-slurm}
else
  dir=${FNVLP_SLURM_DIR:-/var/tmp/fnvlp-slurm-${nodes}n}
fi
conf=$dir/etc/slurm.conf
bridge=fnvlp-br0
net=10.77.0
sock=$dir/munge/munge.socket.2

log() { echo "local-slurm: $*"; }
die() {
  echo "local-slurm: error: $*" >&2
  exit 1
}

# The config a client would use: ours when it exists and nothing else was set up (the
# multi-node cluster is always ours).
client_conf() {
  if [ "$nodes" -gt 1 ]; then
    echo "$conf"
  elif [ -n "${SLURM_CONF:-}" ]; then
    echo "$SLURM_CONF"
  elif [ -f /etc/slurm/slurm.conf ]; then
    echo /etc/slurm/slurm.conf
  else echo "$conf"; fi
}

# pid from a pid file, if that process is alive (a zombie is not: a killed daemon stays one
# until init reaps it).
live_pid() {
  local f=$1 pid st
  [ -s "$f" ] || return 1
  pid=$(cat "$f")
  kill -0 "$pid" 2>/dev/null || return 1
  st=$(ps -o stat= -p "$pid" 2>/dev/null) || return 1
  case "$st" in Z*) return 1 ;; esac
  echo "$pid"
}

# Healthy = controller answers and every node is in a state that runs jobs.
healthy() {
  local c state s
  c=$(client_conf)
  [ -f "$c" ] || return 1
  SLURM_CONF=$c timeout 10 scontrol ping 2>/dev/null | grep 'is UP' >/dev/null || return 1
  state=$(SLURM_CONF=$c timeout 10 sinfo -h -N -o '%t' 2>/dev/null | sort -u | tr '\n' ' ')
  [ -n "$state" ] || return 1
  for s in $state; do
    case "$s" in
      idle* | mix* | alloc* | comp*) ;;
      *) return 1 ;;
    esac
  done
  if [ "$nodes" -gt 1 ]; then
    [ "$(SLURM_CONF=$c timeout 10 sinfo -h -N -o '%N' 2>/dev/null | sort -u | wc -l)" -eq "$nodes" ] || return 1
  fi
}

# The running cluster's config equals what write_conf would write now (timestamp aside).
conf_current() {
  local saved
  [ -f "$conf" ] || return 1
  saved=$(mktemp)
  cp "$conf" "$saved"
  write_conf
  if diff -q <(tail -n +2 "$saved") <(tail -n +2 "$conf") >/dev/null; then
    cp "$saved" "$conf"
    rm -f "$saved"
    return 0
  fi
  rm -f "$saved"
  return 1
}

node_name() { if [ "$nodes" -eq 1 ]; then echo localhost; else echo "fnvlp-n$1"; fi; }
node_addr() { echo "$net.$((10 + $1))"; }

# The lines that differ between the single-node and the namespaced multi-node cluster.
node_conf() {
  local i
  if [ "$1" = head ]; then
    if [ "$nodes" -eq 1 ]; then
      printf '%s\n' ClusterName=fnvlp-local SlurmctldHost=localhost
    else
      printf '%s\n' "ClusterName=fnvlp-${nodes}node" "SlurmctldHost=$(hostname -s)($net.1)" \
        SlurmctldPort=6827 SlurmdPort=6818
    fi
    return
  fi
  if [ "$nodes" -eq 1 ]; then
    printf '%s\n' "SlurmdSpoolDir=$dir/spool" "SlurmdPidFile=$dir/run/slurmd.pid" \
      "SlurmdLogFile=$dir/log/slurmd.log" \
      "NodeName=localhost CPUs=$2 RealMemory=$3 State=UNKNOWN" \
      "PartitionName=local Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES"
    return
  fi
  # Several slurmd on one machine: per-node spool, pid and log files (%n = node name). The nodes
  # share the machine's memory, so each declares its share.
  printf '%s\n' "SlurmdSpoolDir=$dir/spool/%n" "SlurmdPidFile=$dir/run/slurmd-%n.pid" \
    "SlurmdLogFile=$dir/log/slurmd-%n.log"
  for i in $(seq 1 "$nodes"); do
    echo "NodeName=$(node_name "$i") NodeAddr=$(node_addr "$i") NodeHostname=$(node_name "$i") CPUs=$2 RealMemory=$(($3 / nodes)) State=UNKNOWN"
  done
  echo "PartitionName=local Nodes=fnvlp-n[1-$nodes] Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES"
}

write_conf() {
  local cpus mem_mib
  # nproc honours OMP_NUM_THREADS (set to 1 by the test environment): ask for every CPU.
  cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
  # Leave 10% of RAM to the OS so that slurmd's own check never finds less than configured.
  mem_mib=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
  mkdir -p "$dir/etc" "$dir/state" "$dir/spool" "$dir/log" "$dir/run"
  cat >"$conf.tmp" <<EOF
# Written by env/local-slurm.sh: $nodes-node SLURM on this machine ($(date -u +%FT%TZ)).
$(node_conf head)
AuthType=auth/munge
CredType=cred/munge
# cred_expire also sets how long a requeued job waits before it may start again (default 120 s).
AuthInfo=socket=$sock,cred_expire=10
SlurmUser=root
SlurmdUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
# Keep finished jobs visible to scontrol for an hour: the scripts read their final state there.
MinJobAge=3600
JobRequeue=1
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.log
StateSaveLocation=$dir/state
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmctldLogFile=$dir/log/slurmctld.log
PlugStackConfig=$dir/etc/plugstack.conf
KillWait=30
InactiveLimit=0
$(node_conf nodes "$cpus" "$mem_mib")
EOF
  : >"$dir/etc/plugstack.conf"
  mv "$conf.tmp" "$conf"
}

start_munge() {
  if [ -S "$sock" ] && munge -S "$sock" -n </dev/null | unmunge -S "$sock" >/dev/null 2>&1; then
    return 0
  fi
  id munge >/dev/null 2>&1 || die "user munge missing (install the munge package: env/install-debian.sh)"
  # munged insists on owner-only, non-world-writable directories for its key and socket.
  install -d -m 0711 -o munge -g munge "$dir/munge"
  install -d -m 0700 -o munge -g munge "$dir/munge/etc" "$dir/munge/lib" "$dir/munge/log"
  if [ ! -s "$dir/munge/etc/munge.key" ]; then
    mungekey -c -k "$dir/munge/etc/munge.key"
  fi
  chown munge:munge "$dir/munge/etc/munge.key"
  chmod 0400 "$dir/munge/etc/munge.key"
  rm -f "$sock"
  # --force: the state dir's parents (/var/tmp) are world-writable with the sticky bit.
  runuser -u munge -- munged --force --socket="$sock" --key-file="$dir/munge/etc/munge.key" \
    --pid-file="$dir/munge/munged.pid" --seed-file="$dir/munge/lib/munged.seed" \
    --log-file="$dir/munge/log/munged.log"
  for _ in $(seq 1 50); do
    munge -S "$sock" -n </dev/null | unmunge -S "$sock" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  die "munged did not come up; see $dir/munge/log/munged.log"
}

slurmd_pid_file() {
  if [ "$nodes" -eq 1 ]; then echo "$dir/run/slurmd.pid"; else echo "$dir/run/slurmd-$(node_name "$1").pid"; fi
}

# The namespaces, veth pairs and bridge of the multi-node cluster (idempotent).
start_net() {
  local i ns
  command -v ip >/dev/null || die "ip not found: install iproute2"
  if ! ip link show "$bridge" >/dev/null 2>&1; then
    if ip -4 route show | grep "^$net\.0/24" >/dev/null; then
      die "$net.0/24 is already routed on this machine: the namespaced cluster needs it for itself"
    fi
    ip link add "$bridge" type bridge || die "cannot create bridge $bridge (needs CAP_NET_ADMIN)"
    ip addr add "$net.1/24" dev "$bridge"
    ip link set "$bridge" up
  fi
  for i in $(seq 1 "$nodes"); do
    ns=$(node_name "$i")
    ip netns list | grep -w "^$ns" >/dev/null || ip netns add "$ns" || die "cannot create network namespace $ns"
    if ! ip link show "fnvlp-v$i" >/dev/null 2>&1; then
      ip link add "fnvlp-v$i" type veth peer name eth0 netns "$ns"
      ip link set "fnvlp-v$i" master "$bridge" up
      ip -n "$ns" addr add "$(node_addr "$i")/24" dev eth0
      ip -n "$ns" link set eth0 up
      ip -n "$ns" link set lo up
    fi
  done
}

stop_net() {
  local i ns
  for i in $(seq 1 "$nodes"); do
    ns=$(node_name "$i")
    ip link del "fnvlp-v$i" 2>/dev/null || true
    if ip netns list | grep -w "^$ns" >/dev/null; then
      ip netns del "$ns"
      log "removed network namespace $ns"
    fi
  done
  if ip link show "$bridge" >/dev/null 2>&1; then
    ip link del "$bridge"
    log "removed bridge $bridge"
  fi
}

start_slurmd() {
  local i name
  if [ "$nodes" -eq 1 ]; then
    live_pid "$(slurmd_pid_file 1)" >/dev/null || slurmd -f "$conf" ||
      die "slurmd failed; see $dir/log/slurmd.log"
    return
  fi
  for i in $(seq 1 "$nodes"); do
    name=$(node_name "$i")
    live_pid "$(slurmd_pid_file "$i")" >/dev/null && continue
    mkdir -p "$dir/spool/$name"
    # Own network namespace (address) and UTS namespace (hostname): a host of its own to slurmd,
    # srun and MPI; and a mount namespace whose /tmp is the node's own (node-local, as on a
    # cluster: SLURM's pmix plugin keeps per-step directories there under names without the
    # node). slurmd daemonizes inside them. nsenter, not `ip netns exec`, which mounts a fresh
    # /sys without the cgroup filesystem slurmd reads.
    install -d -m 1777 "$dir/tmp/$name"
    # shellcheck disable=SC2016 # expanded by the inner sh
    nsenter --net="/run/netns/$name" unshare --uts --mount --propagation private -- sh -c \
      'mount --bind "$3" /tmp && hostname "$1" && exec slurmd -f "$2" -N "$1"' \
      sh "$name" "$conf" "$dir/tmp/$name" || die "slurmd of $name failed; see $dir/log/slurmd-$name.log"
  done
}

start() {
  if healthy; then
    if [ "$(client_conf)" = "$conf" ] && ! conf_current; then
      log "config of the running cluster is outdated: restarting it"
      stop
    else
      log "reusing the healthy cluster of $(client_conf)"
      return 0
    fi
  fi
  [ "$(id -u)" -eq 0 ] || die "start needs root (slurmctld and slurmd run as root here)"
  for b in munged mungekey slurmctld slurmd scontrol sinfo nsenter unshare; do
    command -v "$b" >/dev/null || die "$b not found: run env/install-debian.sh (slurm-wlm, munge)"
  done
  if [ -n "${SLURM_CONF:-}" ] && [ "$SLURM_CONF" != "$conf" ]; then
    die "SLURM_CONF=$SLURM_CONF points at a cluster that is not healthy; unset it to start the local one"
  fi
  mkdir -p "$dir"
  # The marker lives from start to stop: found at start, the previous daemons died without stop.
  local crashed=0
  [ -f "$dir/run/started" ] && ! live_pid "$dir/run/slurmctld.pid" >/dev/null && crashed=1
  write_conf
  [ "$nodes" -eq 1 ] || start_net
  start_munge
  export SLURM_CONF=$conf
  if ! live_pid "$dir/run/slurmctld.pid" >/dev/null; then
    slurmctld -f "$conf" || die "slurmctld failed; see $dir/log/slurmctld.log"
  fi
  start_slurmd
  local state="" line
  for _ in $(seq 1 120); do
    if scontrol ping 2>/dev/null | grep 'is UP' >/dev/null; then
      state=$(sinfo -h -N -o '%N %t' 2>/dev/null | sort -u)
      healthy && break
      while read -r line; do
        case "${line#* }" in
          down* | drain* | fail*) scontrol update NodeName="${line%% *}" State=RESUME 2>/dev/null || true ;;
        esac
      done <<<"$state"
    fi
    sleep 0.5
  done
  healthy || die "cluster not healthy after start (node state '$state'); logs in $dir/log"
  srun --mpi=list 2>&1 | grep pmix >/dev/null ||
    die "srun --mpi=list does not offer pmix (MpiDefault=pmix); install slurm-wlm's pmix plugin"
  [ "$crashed" -eq 0 ] || cancel_orphans
  mkdir -p "$dir/run"
  date -u +%FT%TZ >"$dir/run/started"
  log "started: $(sinfo -h -o '%P %D %c CPUs %m MiB %t' | head -1); export SLURM_CONF=$conf"
}

# The controller recovers a crashed cluster's jobs from its state: a running job whose processes
# died with the daemons would hold its node until its time limit, and pending ones would start
# for callers that are gone. Cancel them (job ids still continue from the saved state).
cancel_orphans() {
  local ids
  ids=$(squeue -h -t PD,CF,R,CG,S -o '%i' 2>/dev/null | paste -sd ' ' || true)
  if [ -z "$ids" ]; then
    log "the previous cluster under $dir died without stop; it left no unfinished jobs"
    return 0
  fi
  # shellcheck disable=SC2086 # one id per word
  scancel $ids || true
  local n
  for _ in $(seq 1 60); do
    n=$(squeue -h -t PD,CF,R,S -o '%i' 2>/dev/null | wc -l)
    [ "$n" -eq 0 ] && break
    sleep 0.5
  done
  log "the previous cluster under $dir died without stop: cancelled its unfinished jobs $ids; resubmit what still matters"
}

stop() {
  local f name pid stopped=0
  local i files=()
  for i in $(seq 1 "$nodes"); do files+=("$(slurmd_pid_file "$i")"); done
  for f in "${files[@]}" "$dir/run/slurmctld.pid"; do
    name=$(basename "$f" .pid)
    if pid=$(live_pid "$f"); then
      kill -TERM "$pid"
      for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
      stopped=1
      log "stopped $name ($pid)"
    fi
  done
  if pid=$(live_pid "$dir/munge/munged.pid"); then
    kill -TERM "$pid"
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    stopped=1
    log "stopped munged ($pid)"
  fi
  if [ "$nodes" -gt 1 ]; then stop_net; fi
  rm -f "$dir/run/started"
  [ "$stopped" -eq 1 ] || log "nothing of ours was running under $dir"
}

status() {
  local c
  c=$(client_conf)
  if healthy; then
    log "UP ($c): $(SLURM_CONF=$c sinfo -h -N -o '%N %t %c CPUs %m MiB' | paste -sd ',' | sed 's/,/, /g'); $(SLURM_CONF=$c srun --mpi=list 2>&1 | tr '\n' ' ' | sed 's/  */ /g')"
    return 0
  fi
  log "DOWN ($c)"
  return 1
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  env) echo "export SLURM_CONF=$(client_conf)" ;;
  *)
    echo "usage: $0 start|stop|status|env" >&2
    exit 2
    ;;
esac
