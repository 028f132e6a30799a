#!/usr/bin/env bash
# A real Slurm cluster on localhost for crashcart's integration tests.
#
# munged, MariaDB + slurmdbd (real accounting: sacct), slurmctld and several
# slurmd "virtual nodes" (slurmd -N nX, one port each) with fake GPUs (gres.conf
# File= symlinks to /dev/null), all started by us in the foreground under setsid
# with their PIDs recorded, so `down` stops exactly those processes and nothing
# else. Everything lives under $CRASHCART_SLURM_DIR; no system service, /etc/slurm,
# /etc/munge or /run/munge is touched. Also installs openssh-server, which the
# tests run on loopback for the SSH path (tests/harness/sshd_local.sh).
#
# Usage (as root):  slurm_local.sh install | up | down | status | env | reset
#   up      install if needed, configure, start, wait until every node is idle
#   env     prints `export SLURM_CONF=...` for a shell
#   down    cancels our jobs, stops our daemons (by recorded PID)
#   reset   down and delete the directory (a fresh accounting DB next time)
#
# Knobs: CRASHCART_SLURM_DIR=/tmp/crashcart-slurm  CRASHCART_SLURM_NODES=5
#        CRASHCART_SLURM_GPUS=4  CRASHCART_SLURM_PORT_BASE=17800
#        CRASHCART_SLURM_CGROUP=auto|on|off  (memory enforcement: see write_configs)
#        CRASHCART_SLURM_RESERVED=n3,n4  (nodes filled last: see write_configs)
#
# Slurm 22.05 (Debian 12) facts this relies on are noted where they matter.
set -euo pipefail

D=${CRASHCART_SLURM_DIR:-/tmp/crashcart-slurm}
NODES=${CRASHCART_SLURM_NODES:-5}
CPUS=4
MEM_MB=4000
GPUS=${CRASHCART_SLURM_GPUS:-4}
PB=${CRASHCART_SLURM_PORT_BASE:-17800}
CGROUP=${CRASHCART_SLURM_CGROUP:-auto}
RESERVED=${CRASHCART_SLURM_RESERVED:-}
CLUSTER=crashcart-local
PORT_CTLD=$((PB + 17)); PORT_DBD=$((PB + 19)); PORT_MYSQL=$((PB + 33))
DB_USER=slurm; DB_NAME=slurm_acct_db

export SLURM_CONF="$D/etc/slurm.conf"
PIDDIR="$D/run/pids"
PACKAGES="slurmctld slurmd slurm-client slurmdbd munge mariadb-server openssh-server openssh-client"

log() { printf '[slurm_local %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "FATAL: $*"; exit 1; }

# ---------------------------------------------------------------------------
# install: Debian packages. A temporary policy-rc.d (exit 101) keeps the
# packages' scripts from starting the system's own munge/mariadb/slurm/ssh.
# ---------------------------------------------------------------------------
cmd_install() {
  [ "$(id -u)" = 0 ] || die "installing packages needs root"
  local missing=() p
  for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then log "packages already installed"; return 0; fi
  command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get to install them"
  local t0=$SECONDS made_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d; made_policy=1
  fi
  log "apt-get install ${missing[*]}"
  apt-get update -qq || log "WARN: apt-get update had errors (continuing)"
  local rc=0
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || rc=$?
  [ $made_policy = 1 ] && rm -f /usr/sbin/policy-rc.d
  [ $rc = 0 ] || die "apt-get install failed (exit $rc)"
  log "install done in $((SECONDS - t0)) s"
}

# ---------------------------------------------------------------------------
# memory enforcement: an OUT_OF_MEMORY job state needs Slurm's cgroup plugins
# (task/cgroup + ConstrainRAMSpace); the kernel's OOM killer fires inside the
# job's memory cgroup and slurmstepd reports it. That needs a cgroup v1 memory
# controller we may write to (cgroup v2 needs systemd delegation, which a
# container or VM without systemd does not give; slurmd then dies at start).
# ---------------------------------------------------------------------------
use_cgroup() {
  case "$CGROUP" in
    on) return 0 ;;
    off) return 1 ;;
  esac
  [ -d /sys/fs/cgroup/memory ] && [ -w /sys/fs/cgroup/memory ] \
    && [ -e /sys/fs/cgroup/memory/memory.limit_in_bytes ] \
    && [ -d /sys/fs/cgroup/freezer ] && [ -w /sys/fs/cgroup/freezer ]
}

write_configs() {
  mkdir -p "$D"/{etc,log,state,spool,jobs,fakegpu} "$PIDDIR"
  chmod 755 "$D" "$D/run" "$D/log"          # munged: the socket dir must be a+x, not world-writable
  mkdir -p "$D/munge"; chmod 700 "$D/munge"
  local i
  for i in $(seq 1 "$NODES"); do mkdir -p "$D/spool/n$i"; done
  # Slurm 22.05 drops file-less GPUs ("Removing file-less GPU"); File= must be a
  # device: symlinks to /dev/null pass, their trailing digit is the GPU index.
  for i in $(seq 0 $((GPUS - 1))); do ln -sfn /dev/null "$D/fakegpu/nvidia$i"; done
  [ -s "$D/etc/db.pass" ] || { head -c 18 /dev/urandom | base64 | tr -d '/+=' > "$D/etc/db.pass"; chmod 600 "$D/etc/db.pass"; }

  # Job ids start at a number of this cluster's own. Every fresh cluster would otherwise
  # number its jobs 1, 2, 3..., and what lives outside $D is keyed by node name and job id:
  # the cgroups (/sys/fs/cgroup/*/slurm_n2/uid_0/job_4) and the kernel log's OOM lines. A
  # cluster started earlier on this machine (or running next to this one) then shares job 4's
  # cgroup, and its step cleanup kills our job 4, or its OOM lines read as ours.
  [ -s "$D/etc/first-job-id" ] || echo $(( (RANDOM * 32768 + RANDOM) % 50000000 + 100000 )) > "$D/etc/first-job-id"

  local tasks proctrack mode
  if use_cgroup; then
    proctrack=proctrack/cgroup; tasks=task/cgroup; mode=cgroup
  else
    proctrack=proctrack/linuxproc; tasks=task/none; mode=none
  fi
  echo "$mode" > "$D/etc/memory-enforcement"

  cat > "$D/etc/slurm.conf" <<EOF
# generated by crashcart tests/harness/slurm_local.sh
ClusterName=$CLUSTER
SlurmctldHost=localhost
SlurmctldPort=$PORT_CTLD
SlurmdPort=$((PB + 18))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$D/run/munge.sock
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool/%n
SlurmctldPidFile=$D/run/slurmctld.pid
SlurmdPidFile=$D/run/slurmd-%n.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=$proctrack
TaskPlugin=$tasks
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=5
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=200
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$PORT_DBD
# With a private munge socket the slurmctld->slurmdbd connection takes its
# socket from AccountingStoragePass (not AuthInfo); without it slurmctld dies.
AccountingStoragePass=$D/run/munge.sock
AccountingStorageTRES=gres/gpu
# crashcart records "resubmit of JOBID" in the job comment: keep it in sacct too.
AccountingStoreFlags=job_comment
JobCompType=jobcomp/none
GresTypes=gpu
MailProg=/bin/true
# 1: a node an admin (or a test) sets DOWN stays down until resumed.
ReturnToService=1
SlurmdParameters=config_overrides
KillWait=2
FirstJobId=$(cat "$D/etc/first-job-id")
InactiveLimit=0
# slurmctld keeps an ended job for MinJobAge seconds (default 300), then only accounting has
# it. A test session lasts longer than that, so with the default whether a job's record (its
# log paths, its state) comes from slurmctld or from accounting alone would depend on how long
# ago an earlier test, or a slow machine, ended it. An hour keeps every job of a session.
MinJobAge=3600
# Preemption for the preempted-job test: a job in "urgent" cancels one in "debug".
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
EOF
  # Reserved nodes weigh more: the scheduler places a job that names no node (or a resubmit
  # that excludes one) on them only when every other node is full, so their job history is
  # only what a test ran there on purpose.
  local weight
  for i in $(seq 1 "$NODES"); do
    weight=1; case ",$RESERVED," in *",n$i,"*) weight=100 ;; esac
    echo "NodeName=n$i NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((PB + 100 + i)) CPUs=$CPUS RealMemory=$MEM_MB Gres=gpu:$GPUS Weight=$weight State=UNKNOWN" >> "$D/etc/slurm.conf"
  done
  # MaxTime=60 on debug: a job asking for more pends with reason PartitionTimeLimit.
  cat >> "$D/etc/slurm.conf" <<EOF
PartitionName=debug Nodes=ALL Default=YES MaxTime=60 PriorityTier=1 State=UP
PartitionName=urgent Nodes=n$NODES MaxTime=60 PriorityTier=2 State=UP
EOF

  {
    echo "AutoDetect=off"
    echo "NodeName=n[1-$NODES] Name=gpu File=$D/fakegpu/nvidia[0-$((GPUS - 1))]"
  } > "$D/etc/gres.conf"

  # slurmd 22.05 always loads a cgroup plugin; autodetect picks v2 on a v2 host,
  # which without systemd kills slurmd. v1 never touches the cgroup fs unless a
  # cgroup plugin (task/proctrack) uses it.
  {
    echo "CgroupPlugin=cgroup/v1"
    echo "CgroupMountpoint=/sys/fs/cgroup"
    if [ "$mode" = cgroup ]; then
      echo "ConstrainRAMSpace=yes"
      echo "ConstrainSwapSpace=yes"
      echo "AllowedSwapSpace=0"
    fi
  } > "$D/etc/cgroup.conf"

  # slurmdbd.conf sits next to slurm.conf, mode 600, owned by SlurmUser.
  cat > "$D/etc/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$D/run/munge.sock
DbdHost=localhost
DbdPort=$PORT_DBD
SlurmUser=root
LogFile=$D/log/slurmdbd.log
PidFile=$D/run/slurmdbd.pid
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$PORT_MYSQL
StorageUser=$DB_USER
StoragePass=$(cat "$D/etc/db.pass")
StorageLoc=$DB_NAME
EOF
  chmod 600 "$D/etc/slurmdbd.conf"
}

# ---------------------------------------------------------------------------
# processes: we record $! ourselves and only signal those PIDs, after checking
# /proc/PID/exe is still the binary we started.
# ---------------------------------------------------------------------------
proc_running() {
  local st; st=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [ -n "$st" ] && [ "$st" != Z ]
}
pid_alive() { # name exe
  local f="$PIDDIR/$1.pid" pid
  [ -s "$f" ] || return 1
  pid=$(cat "$f")
  # Debian installs the Slurm daemons through update-alternatives: compare resolved paths.
  proc_running "$pid" && [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$(readlink -f "$2")" ] && ours "$pid"
}
ours() { # pid: started by this script for $D. The pid of a daemon that died may since have gone
  # to the same daemon of another cluster on this machine (another test session's); each of ours
  # was started with this cluster's SLURM_CONF in its environment. Unreadable: the exe must do.
  local env; env=$(tr '\0' '\n' < "/proc/$1/environ" 2>/dev/null) || return 0
  grep -qxF "SLURM_CONF=$SLURM_CONF" <<<"$env"
}
start_daemon() { # name exe args...
  local name=$1 exe=$2; shift 2
  if pid_alive "$name" "$exe"; then log "$name already running (pid $(cat "$PIDDIR/$name.pid"))"; return 0; fi
  # setsid: its own session, so a Ctrl-C to the caller does not reach it; a
  # background job of a non-interactive shell is no group leader, so setsid
  # exec()s in place and $! is the daemon's PID.
  setsid "$exe" "$@" </dev/null >>"$D/log/$name.out" 2>&1 &
  echo $! > "$PIDDIR/$name.pid"
  log "started $name pid $!"
}
stop_daemon() { # name exe
  local name=$1 exe=$2 f="$PIDDIR/$1.pid" pid i
  [ -s "$f" ] || return 0
  pid=$(cat "$f")
  if pid_alive "$name" "$exe"; then
    kill -TERM "$pid"
    for i in $(seq 1 150); do proc_running "$pid" || break; sleep 0.2; done
    if proc_running "$pid"; then log "$name pid $pid ignored SIGTERM, SIGKILL"; kill -KILL "$pid"; fi
    log "stopped $name (pid $pid)"
  elif proc_running "$pid"; then
    log "WARN: $f names pid $pid, which is no longer $exe; not touching it"
  fi
  rm -f "$f"
}
wait_for() { # seconds description command...
  local secs=$1 what=$2 i; shift 2
  for i in $(seq 1 $((secs * 5))); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  die "timed out after ${secs}s waiting for $what (see $D/log)"
}
wait_up() { # name exe seconds command...  (fails fast when the daemon died)
  local name=$1 exe=$2 secs=$3 i; shift 3
  for i in $(seq 1 $((secs * 5))); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    # Running, not pid_alive: until setsid has exec()ed, the pid's exe is still setsid's.
    if ! proc_running "$(cat "$PIDDIR/$name.pid")"; then
      tail -n 15 "$D/log/$name.out" >&2 || true
      [ "$name" != mariadbd ] || tail -n 15 "$D/mysql/mariadb.err" >&2 || true
      die "$name exited during startup (log: $D/log/$name.out)"
    fi
    sleep 0.2
  done
  die "timed out after ${secs}s waiting for $name (see $D/log)"
}

all_nodes_idle() {
  local out; out=$(sinfo -h -N -p debug -o '%N %t' 2>/dev/null) || return 1
  [ "$(echo "$out" | grep -c ' idle$')" -eq "$NODES" ]
}

# ---------------------------------------------------------------------------
# up
# ---------------------------------------------------------------------------
cmd_up() {
  [ "$(id -u)" = 0 ] || die "the daemons run as root (mariadbd drops to user mysql)"
  local t0=$SECONDS
  cmd_install
  write_configs

  if [ ! -s "$D/munge/munge.key" ]; then
    if command -v mungekey >/dev/null; then mungekey -c -k "$D/munge/munge.key"
    else dd if=/dev/urandom of="$D/munge/munge.key" bs=1024 count=1 2>/dev/null; fi
    chmod 400 "$D/munge/munge.key"
  fi
  start_daemon munged /usr/sbin/munged -F --socket="$D/run/munge.sock" \
    --key-file="$D/munge/munge.key" --pid-file="$D/run/munged.pid" \
    --seed-file="$D/munge/munged.seed" --log-file="$D/log/munged.log"
  wait_up munged /usr/sbin/munged 10 bash -c "munge -S '$D/run/munge.sock' -n | unmunge -S '$D/run/munge.sock'"

  # MariaDB: a private instance whose files belong to user mysql.
  mkdir -p "$D/mysql"; chown mysql:mysql "$D/mysql"
  if [ ! -d "$D/mysql/data/mysql" ]; then
    mariadb-install-db --no-defaults --user=mysql --datadir="$D/mysql/data" \
      --auth-root-authentication-method=socket --skip-test-db \
      --innodb-log-file-size=16M >"$D/log/mariadb-install.log" 2>&1 \
      || die "mariadb-install-db failed, see $D/log/mariadb-install.log"
  fi
  start_daemon mariadbd /usr/sbin/mariadbd --no-defaults --user=mysql \
    --datadir="$D/mysql/data" --socket="$D/mysql/mysqld.sock" --pid-file="$D/mysql/mysqld.pid" \
    --log-error="$D/mysql/mariadb.err" --port="$PORT_MYSQL" --bind-address=127.0.0.1 \
    --skip-log-bin --performance-schema=OFF --innodb-lock-wait-timeout=900 \
    --innodb-buffer-pool-size=16M --innodb-log-file-size=16M --innodb-log-buffer-size=2M \
    --aria-pagecache-buffer-size=8M --key-buffer-size=1M --max-connections=50
  wait_up mariadbd /usr/sbin/mariadbd 60 mariadb-admin --no-defaults -uroot -S "$D/mysql/mysqld.sock" ping
  local pw; pw=$(cat "$D/etc/db.pass")
  mariadb --no-defaults -uroot -S "$D/mysql/mysqld.sock" -e "
    CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$pw';
    CREATE USER IF NOT EXISTS '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$pw';
    GRANT ALL ON $DB_NAME.* TO '$DB_USER'@'localhost';
    GRANT ALL ON $DB_NAME.* TO '$DB_USER'@'127.0.0.1';
    FLUSH PRIVILEGES;"

  start_daemon slurmdbd /usr/sbin/slurmdbd -D
  wait_up slurmdbd /usr/sbin/slurmdbd 60 timeout 10 sacctmgr -n show cluster

  start_daemon slurmctld /usr/sbin/slurmctld -D -i
  wait_up slurmctld /usr/sbin/slurmctld 30 bash -c "scontrol ping | grep -q 'is UP'"

  # One slurmd per virtual node; -N picks the NodeName, so `hostname -s` need not match.
  local i
  for i in $(seq 1 "$NODES"); do start_daemon "slurmd-n$i" /usr/sbin/slurmd -D -N "n$i"; done
  for i in $(seq 1 "$NODES"); do
    wait_up "slurmd-n$i" /usr/sbin/slurmd 30 bash -c "sinfo -h -n n$i -o %T | grep -qv -e unknown -e '^$'"
  done
  # Node state survives restarts in $D/state: resume what an earlier run left
  # drained or down, so every `up` starts from an all-idle cluster.
  scontrol update NodeName="n[1-$NODES]" State=RESUME >/dev/null 2>&1 || true
  wait_for 60 "all $NODES nodes idle" all_nodes_idle
  wait_for 30 "sacct" sacct -n -X -S now
  wait_for 30 "cluster registered in slurmdbd" bash -c \
    "sacctmgr -n -P show cluster format=cluster,controlport | grep -q '^$CLUSTER|$PORT_CTLD'"
  log "cluster '$CLUSTER' up in $((SECONDS - t0)) s (nodes n[1-$NODES], memory enforcement: $(cat "$D/etc/memory-enforcement"))"
}

# ---------------------------------------------------------------------------
# down: cancel jobs, then stop our daemons in reverse order, by recorded PID
# ---------------------------------------------------------------------------
cmd_down() {
  if pid_alive slurmctld /usr/sbin/slurmctld; then
    local ids; ids=$(squeue -h -o '%A' 2>/dev/null || true)
    if [ -n "$ids" ]; then
      # shellcheck disable=SC2086
      scancel $ids 2>/dev/null || true
      local i   # let slurmstepd (children of our slurmd) finish before slurmd goes
      for i in $(seq 1 100); do
        [ -z "$(squeue -h -t RUNNING,COMPLETING,CONFIGURING 2>/dev/null)" ] && break; sleep 0.2
      done
    fi
  fi
  local f
  for f in "$PIDDIR"/slurmd-n*.pid; do
    [ -e "$f" ] || continue
    stop_daemon "$(basename "$f" .pid)" /usr/sbin/slurmd
  done
  stop_daemon slurmctld /usr/sbin/slurmctld
  stop_daemon slurmdbd  /usr/sbin/slurmdbd
  stop_daemon mariadbd  /usr/sbin/mariadbd
  stop_daemon munged    /usr/sbin/munged
  log "down"
}

cmd_status() {
  local n rc=0
  for n in munged mariadbd slurmdbd slurmctld $(cd "$PIDDIR" 2>/dev/null && ls slurmd-n*.pid 2>/dev/null | sed 's/\.pid$//'); do
    local exe=/usr/sbin/${n%%-n*}
    if pid_alive "$n" "$exe"; then printf '%-10s running pid %s\n' "$n" "$(cat "$PIDDIR/$n.pid")"
    elif [ -e "$PIDDIR/$n.pid" ]; then printf '%-10s DEAD\n' "$n"; rc=1
    fi
  done
  pid_alive slurmctld /usr/sbin/slurmctld && sinfo
  return $rc
}

case "${1:-}" in
  install) cmd_install ;;
  up)      cmd_up ;;
  down)    cmd_down ;;
  status)  cmd_status ;;
  env)     echo "export SLURM_CONF=$SLURM_CONF" ;;
  reset)   cmd_down; rm -rf "$D"; log "removed $D" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 2 ;;
esac
