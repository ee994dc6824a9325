#!/usr/bin/env bash
# A real single-node SLURM on localhost (DESIGN.md §5): munged as user munge with its own key,
# slurmctld and slurmd as root, proctrack/linuxproc, task/none, select/cons_tres, MpiDefault=pmix,
# one node with this machine's CPUs and memory. Every file it writes (config, key, sockets, state,
# spool, logs, pid files) lies under $FNVLP_SLURM_DIR (default /var/tmp/fnvlp-slurm).
#
#   env/local-slurm.sh start    start what is not running; reuse a healthy cluster (idempotent)
#   env/local-slurm.sh stop     stop the daemons this script started (idempotent)
#   env/local-slurm.sh status   exit 0 when the controller answers and the node takes jobs
#   env/local-slurm.sh env      print the export line clients need (SLURM_CONF)
#
# Clients (sbatch, squeue, srun) find the config through SLURM_CONF; slurm/common.sh sets it
# when /etc/slurm/slurm.conf is absent, and `eval "$(env/local-slurm.sh env)"` does it by hand.
set -euo pipefail
dir=${FNVLP_SLURM_DIR:-/var/tmp/fnvlp-slurm}
conf=$dir/etc/slurm.conf
sock=$dir/munge/munge.socket.2

log() { echo "local-slurm: $*"; }
die() {
  echo "local-slurm: error: $*" >&2
  exit 1
}

# The config a client would use: ours when it exists and nothing else was set up.
client_conf() {
  if [ -n "${SLURM_CONF:-}" ]; then
    echo "$SLURM_CONF"
  elif [ -f /etc/slurm/slurm.conf ]; then
    echo /etc/slurm/slurm.conf
  else echo "$conf"; fi
}

# pid from a pid file, if that process is alive.
live_pid() {
  local f=$1 pid
  [ -s "$f" ] || return 1
  pid=$(cat "$f")
  kill -0 "$pid" 2>/dev/null && echo "$pid"
}

# Healthy = controller answers and the node is in a state that runs jobs.
healthy() {
  local c state
  c=$(client_conf)
  [ -f "$c" ] || return 1
  SLURM_CONF=$c timeout 10 scontrol ping 2>/dev/null | grep -q 'is UP' || return 1
  state=$(SLURM_CONF=$c timeout 10 sinfo -h -N -o '%t' 2>/dev/null | head -1)
  case "$state" in
    idle* | mix* | alloc* | comp*) return 0 ;;
    *) return 1 ;;
  esac
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

write_conf() {
  local cpus mem_mib
  # nproc honours OMP_NUM_THREADS (set to 1 by the test environment): ask for every CPU.
  cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
  # Leave 10% of RAM to the OS so that slurmd's own check never finds less than configured.
  mem_mib=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
  mkdir -p "$dir/etc" "$dir/state" "$dir/spool" "$dir/log" "$dir/run"
  cat >"$conf.tmp" <<EOF
# Written by env/local-slurm.sh: single-node SLURM on localhost ($(date -u +%FT%TZ)).
ClusterName=fnvlp-local
SlurmctldHost=localhost
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
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
PlugStackConfig=$dir/etc/plugstack.conf
KillWait=30
InactiveLimit=0
NodeName=localhost CPUs=$cpus RealMemory=$mem_mib State=UNKNOWN
PartitionName=local Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
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
  for b in munged mungekey slurmctld slurmd scontrol sinfo; do
    command -v "$b" >/dev/null || die "$b not found: run env/install-debian.sh (slurm-wlm, munge)"
  done
  if [ -n "${SLURM_CONF:-}" ] && [ "$SLURM_CONF" != "$conf" ]; then
    die "SLURM_CONF=$SLURM_CONF points at a cluster that is not healthy; unset it to start the local one"
  fi
  mkdir -p "$dir"
  write_conf
  start_munge
  export SLURM_CONF=$conf
  if ! live_pid "$dir/run/slurmctld.pid" >/dev/null; then
    slurmctld -f "$conf" || die "slurmctld failed; see $dir/log/slurmctld.log"
  fi
  if ! live_pid "$dir/run/slurmd.pid" >/dev/null; then
    slurmd -f "$conf" || die "slurmd failed; see $dir/log/slurmd.log"
  fi
  local state=""
  for _ in $(seq 1 120); do
    if scontrol ping 2>/dev/null | grep -q 'is UP'; then
      state=$(sinfo -h -N -o '%t' 2>/dev/null | head -1)
      case "$state" in
        idle* | mix* | alloc* | comp*) break ;;
        down* | drain* | fail*) scontrol update NodeName=localhost State=RESUME 2>/dev/null || true ;;
      esac
    fi
    sleep 0.5
  done
  healthy || die "cluster not healthy after start (node state '$state'); logs in $dir/log"
  srun --mpi=list 2>&1 | grep -q pmix ||
    die "srun --mpi=list does not offer pmix (MpiDefault=pmix); install slurm-wlm's pmix plugin"
  log "started: $(sinfo -h -o '%P %D %c CPUs %m MiB %t' | head -1); export SLURM_CONF=$conf"
}

stop() {
  local name pid stopped=0
  for name in slurmd slurmctld; do
    if pid=$(live_pid "$dir/run/$name.pid"); then
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
  [ "$stopped" -eq 1 ] || log "nothing of ours was running under $dir"
}

status() {
  local c
  c=$(client_conf)
  if healthy; then
    log "UP ($c): $(SLURM_CONF=$c sinfo -h -N -o '%N %t %c CPUs %m MiB' | head -1); $(SLURM_CONF=$c srun --mpi=list 2>&1 | tr '\n' ' ' | sed 's/  */ /g')"
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
