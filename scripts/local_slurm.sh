#!/usr/bin/env bash
# A real Slurm cluster on this one machine, for tests and CI: munge, slurmdbd + MariaDB (accounting, so sacct and
# submitit see job states), slurmctld and two slurmd daemons (simulated nodes n1, n2; CPUs=2 each).
#
# Usage: bash scripts/local_slurm.sh up|down|status|restart
#   up      install the Debian packages when missing, start whatever is not running (idempotent; a no-op
#           that prints the status when all runs), wait for both nodes to be idle, run `srun -N2 hostname`.
#   down    cancel all jobs, stop every daemon this script started (by the PID in its pid file).
#   status  one line per daemon plus sinfo; exit 0 when all run, 3 otherwise.
#
# Needs root, Linux and apt (Debian 12: Slurm 22.05, munge 0.5, MariaDB 10.11). No systemd is used.
# Everything lives under ${PRIMUS_SLURM_HOME:-/var/tmp/primus-slurm}:
#   etc/slurm.conf etc/slurmdbd.conf   generated configs (clients: export SLURM_CONF=$PRIMUS_SLURM_HOME/etc/slurm.conf)
#   env.sh                             `export SLURM_CONF=...`
#   state/  spool/n1 spool/n2          slurmctld state (fresh per bring-up) and slurmd spools
#   run/*.pid                          pid files of the daemons this script started
#   log/*.log                          daemon logs
#   munge/                             private munge key, socket, pid, log (owned by munge)
#   mysql/                             private MariaDB datadir, socket, pid, error log (owned by mysql)
# Ports (non-default, so that a real Slurm/MariaDB on the machine is not disturbed):
#   slurmctld 17817, slurmd n1/n2 17001-17002, slurmdbd 17819, MariaDB 127.0.0.1:17306
#   (${PRIMUS_SLURM_PORT_BASE:-17000} + 817, 1-2, 819, 306).
set -euo pipefail

H="${PRIMUS_SLURM_HOME:-/var/tmp/primus-slurm}"
CLUSTER=primus
NODES=(n1 n2)
# PRIMUS_SLURM_PORT_BASE moves all ports (a second cluster next to a running one needs another home and base)
PORT_BASE="${PRIMUS_SLURM_PORT_BASE:-17000}"
CTLD_PORT=$((PORT_BASE + 817))
DBD_PORT=$((PORT_BASE + 819))
DB_PORT=$((PORT_BASE + 306))
DB_PASS=primus-slurm-local   # a local, 127.0.0.1-only test database
WAIT_IDLE_S="${PRIMUS_SLURM_WAIT_S:-60}"
export SLURM_CONF="$H/etc/slurm.conf"

log() { echo "[local_slurm] $*" >&2; }
die() { echo "[local_slurm] error: $*" >&2; exit 1; }
now_ms() { date +%s%3N; }

# --- daemons: name -> pid file, expected /proc/<pid>/comm ------------------------------------------------------
DAEMONS=(munged mariadbd slurmdbd slurmctld "${NODES[@]/#/slurmd-}")
pidfile_of() {
  case "$1" in
    munged) echo "$H/munge/munged.pid" ;;
    mariadbd) echo "$H/mysql/mariadbd.pid" ;;
    *) echo "$H/run/$1.pid" ;;
  esac
}
comm_of() { case "$1" in slurmd-*) echo slurmd ;; *) echo "$1" ;; esac; }

# The pid in the daemon's pid file when that process is alive and is the expected program (guards against a stale
# pid file whose pid was reused); empty otherwise.
live_pid() {
  local f pid comm
  f="$(pidfile_of "$1")"
  [[ -s "$f" ]] || return 0
  pid="$(tr -dc 0-9 < "$f" 2>/dev/null || true)"
  [[ -n "$pid" && -r "/proc/$pid/comm" ]] || return 0
  comm="$(cat "/proc/$pid/comm" 2>/dev/null || true)"
  # mariadbd may show as mysqld on some builds
  if [[ "$comm" == "$(comm_of "$1")" || ( "$1" == mariadbd && "$comm" == mysqld ) ]]; then
    # a zombie is not running
    [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]] && echo "$pid"
  fi
  return 0
}

has_pid() { [[ -n "$(live_pid "$1")" ]]; }

all_running() {
  local d
  for d in "${DAEMONS[@]}"; do [[ -n "$(live_pid "$d")" ]] || return 1; done
}

# TERM, wait up to 10 s, then KILL; only the pid from our own pid file.
stop_daemon() {
  local d="$1" pid i
  pid="$(live_pid "$d")"
  if [[ -z "$pid" ]]; then rm -f "$(pidfile_of "$d")"; return 0; fi
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    [[ -d "/proc/$pid" && "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]] || break
    sleep 0.1
  done
  if [[ -d "/proc/$pid" && "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]]; then
    log "$d (pid $pid) did not stop within 10 s; sending KILL"
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.2
  fi
  rm -f "$(pidfile_of "$d")"
}

# wait_for WHAT TIMEOUT_S CMD...: wait up to TIMEOUT_S s until CMD succeeds (WHAT only names it for readers).
wait_for() {
  local timeout_s="$2"; shift 2
  local deadline=$(( $(now_ms) + timeout_s * 1000 ))
  until "$@" >/dev/null 2>&1; do
    (( $(now_ms) < deadline )) || return 1
    sleep 0.1
  done
}

# --- packages --------------------------------------------------------------------------------------------------
PKGS=(munge slurmctld slurmd slurm-client slurmdbd mariadb-server mariadb-client)
install_packages() {
  local missing=() p
  for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  (( ${#missing[@]} )) || return 0
  command -v apt-get >/dev/null || die "missing packages (${missing[*]}) and no apt-get"
  log "installing ${missing[*]} (apt-get)"
  local t0; t0=$(now_ms)
  # Packages must not start their own services (the system munge/MariaDB would be daemons we did not start):
  # Debian's policy-rc.d hook denies it; add one for the duration when the machine has none.
  local own_policy=0
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d; own_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  local rc=0
  {
    apt-get update -qq &&
    apt-get install -y -qq --no-install-recommends -o Dpkg::Options::=--force-confdef \
      -o Dpkg::Options::=--force-confold "${missing[@]}"
  } > "$H/log/apt.log" 2>&1 || rc=$?
  (( own_policy )) && rm -f /usr/sbin/policy-rc.d
  (( rc == 0 )) || { tail -n 20 "$H/log/apt.log" >&2; die "apt-get failed (rc $rc); see $H/log/apt.log"; }
  log "packages installed in $(( $(now_ms) - t0 ))ms"
}

# --- /etc/hosts ------------------------------------------------------------------------------------------------
ensure_hosts() {
  local missing=() n
  for n in "${NODES[@]}"; do
    getent hosts "$n" >/dev/null 2>&1 || missing+=("$n")
  done
  (( ${#missing[@]} )) || return 0
  log "adding '127.0.0.1 ${missing[*]}' to /etc/hosts"
  # append only: other entries stay untouched; a line is added only for names that do not resolve yet
  [[ -z "$(tail -c1 /etc/hosts 2>/dev/null)" ]] || echo >> /etc/hosts
  echo "127.0.0.1 ${missing[*]}" >> /etc/hosts
}

# --- configs ---------------------------------------------------------------------------------------------------
write_configs() {
  local host; host="$(hostname -s)"
  local first_job_id="$1"
  # Job ids: the state directory is fresh per bring-up (no stale jobs or nodes from an earlier run are recovered),
  # which would restart job ids at 1. Accounting (and submitit folders keyed by %j) outlive the state directory,
  # so a repeated id would find stale sacct records and stale result files. Hence FirstJobId continues after the
  # highest id ever recorded in the accounting database: ids stay unique across bring-ups.
  cat > "$H/etc/slurm.conf.new" <<EOF
# Generated by scripts/local_slurm.sh; edits are overwritten at the next fresh bring-up.
ClusterName=$CLUSTER
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# cred_expire: a requeued job becomes eligible cred_expire+1 s after the requeue (default 120 s; too slow for tests)
AuthInfo=socket=$H/munge/munge.socket,cred_expire=10
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
# a job that becomes eligible later (e.g. after a requeue) starts within ~1-2 s instead of the 30-60 s default
SchedulerParameters=sched_interval=2,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
FirstJobId=$first_job_id
# accounting (sacct; submitit reads job states from it)
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
# for slurmdbd connections the munge socket is given here, not by AuthInfo
AccountingStoragePass=$H/munge/munge.socket
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
JobCompType=jobcomp/none
# requeue/preemption tests (submitit's job._interrupt(): scancel --signal TERM/USR2, then scontrol requeue)
JobRequeue=1
SlurmctldParameters=preempt_send_user_signal
# fast tests
KillWait=5
MinJobAge=300
CompleteWait=0
InactiveLimit=0
MessageTimeout=10
# a killed slurmd (the node-failure test) is found down within SlurmdTimeout and a ping (every SlurmdTimeout/3)
SlurmdTimeout=15
SlurmctldTimeout=30
BatchStartTimeout=20
UnkillableStepTimeout=30
# paths
StateSaveLocation=$H/state
SlurmdSpoolDir=$H/spool/%n
SlurmctldPidFile=$H/run/slurmctld.pid
SlurmdPidFile=$H/run/slurmd-%n.pid
SlurmctldLogFile=$H/log/slurmctld.log
SlurmdLogFile=$H/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName=n[1-2] NodeHostname=$host NodeAddr=127.0.0.1 Port=[$((PORT_BASE + 1))-$((PORT_BASE + 2))] CPUs=2 RealMemory=8000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
  mv -f "$H/etc/slurm.conf.new" "$H/etc/slurm.conf"

  ( umask 077
    cat > "$H/etc/slurmdbd.conf" <<EOF
# Generated by scripts/local_slurm.sh (mode 600: it holds the DB password)
AuthType=auth/munge
AuthInfo=socket=$H/munge/munge.socket
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
PidFile=$H/run/slurmdbd.pid
LogFile=$H/log/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
EOF
  )
  chmod 600 "$H/etc/slurmdbd.conf"
  echo "export SLURM_CONF=$H/etc/slurm.conf" > "$H/env.sh"
}

# After a start: the daemon's pid file names a live process of the right program (a daemon that exits right after
# forking, e.g. because its port is taken by an orphan whose pid file was lost, is reported here).
await_pid() {
  local d="$1" logf="$2"
  wait_for "$d" 10 has_pid "$d" || die "$d did not stay up; see $logf"
}

# --- start functions -------------------------------------------------------------------------------------------
start_munged() {
  local m="$H/munge"
  mkdir -p "$m"; chown munge:munge "$m"; chmod 755 "$m"
  if [[ ! -s "$m/munge.key" ]]; then
    dd if=/dev/urandom bs=1 count=1024 of="$m/munge.key" status=none
  fi
  chown munge:munge "$m/munge.key"; chmod 400 "$m/munge.key"
  rm -f "$m/munge.socket" "$m/munge.socket.lock" "$m/munged.pid"
  runuser -u munge -- /usr/sbin/munged --key-file="$m/munge.key" --socket="$m/munge.socket" \
    --pid-file="$m/munged.pid" --log-file="$m/munged.log" --seed-file="$m/munged.seed" </dev/null >/dev/null 2>&1 \
    || die "munged failed to start; see $m/munged.log"
  wait_for munged 10 test -S "$m/munge.socket" || die "munged socket missing; see $m/munged.log"
  await_pid munged "$m/munged.log"
}

mysql_client() { mariadb --no-defaults --socket="$H/mysql/mysql.sock" -uroot "$@"; }

start_mariadbd() {
  local m="$H/mysql"
  mkdir -p "$m"; chown mysql:mysql "$m"; chmod 750 "$m"
  if [[ ! -d "$m/data/mysql" ]]; then
    rm -rf "$m/data"
    log "initialising MariaDB datadir $m/data"
    mariadb-install-db --no-defaults --user=mysql --datadir="$m/data" --auth-root-authentication-method=socket \
      --skip-test-db > "$H/log/mariadb-install.log" 2>&1 || die "mariadb-install-db failed; see $H/log/mariadb-install.log"
  fi
  rm -f "$m/mariadbd.pid" "$m/mysql.sock"
  touch "$m/mariadbd.err"; chown mysql:mysql "$m/mariadbd.err"
  # mariadbd does not daemonize itself: detach it (setsid, no inherited stdio).
  setsid /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$m/data" --socket="$m/mysql.sock" \
    --pid-file="$m/mariadbd.pid" --log-error="$m/mariadbd.err" --port=$DB_PORT --bind-address=127.0.0.1 \
    --skip-name-resolve --innodb-buffer-pool-size=128M --innodb-log-file-size=64M --innodb-lock-wait-timeout=900 \
    --skip-log-bin --performance-schema=OFF </dev/null >/dev/null 2>&1 &
  wait_for mariadbd 30 mysql_client -e "select 1" || die "MariaDB did not come up within 30 s; see $m/mariadbd.err"
  await_pid mariadbd "$m/mariadbd.err"
  mysql_client <<EOF || die "could not create the slurm DB user"
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
EOF
}

start_slurmdbd() {
  rm -f "$H/run/slurmdbd.pid"
  SLURM_CONF="$H/etc/slurm.conf" /usr/sbin/slurmdbd </dev/null >/dev/null 2>&1 \
    || die "slurmdbd failed to start; see $H/log/slurmdbd.log"
  wait_for slurmdbd 30 sacctmgr -n list cluster || die "slurmdbd does not answer within 30 s; see $H/log/slurmdbd.log"
  await_pid slurmdbd "$H/log/slurmdbd.log"
  if ! sacctmgr -n -P list cluster format=cluster 2>/dev/null | grep -qx "$CLUSTER"; then
    sacctmgr -i add cluster "$CLUSTER" >/dev/null || die "sacctmgr add cluster failed; see $H/log/slurmdbd.log"
  fi
}

start_slurmctld() {
  rm -f "$H/run/slurmctld.pid"
  /usr/sbin/slurmctld -f "$H/etc/slurm.conf" </dev/null >/dev/null 2>&1 \
    || die "slurmctld failed to start; see $H/log/slurmctld.log"
  wait_for slurmctld 30 scontrol ping || die "slurmctld does not answer within 30 s; see $H/log/slurmctld.log"
  await_pid slurmctld "$H/log/slurmctld.log"
}

start_slurmd() {
  local n="$1"
  mkdir -p "$H/spool/$n"
  rm -f "$H/run/slurmd-$n.pid"
  /usr/sbin/slurmd -f "$H/etc/slurm.conf" -N "$n" </dev/null >/dev/null 2>&1 \
    || die "slurmd $n failed to start; see $H/log/slurmd-$n.log"
  await_pid "slurmd-$n" "$H/log/slurmd-$n.log"
}

# The highest job id in the accounting DB (0 when none), +1: see FirstJobId in write_configs.
next_job_id() {
  local max
  max="$(mysql_client -N -B -e "SELECT COALESCE(MAX(id_job),0) FROM slurm_acct_db.${CLUSTER}_job_table" 2>/dev/null || echo 0)"
  [[ "$max" =~ ^[0-9]+$ ]] || max=0
  echo $(( max + 1 ))
}

nodes_ready() {
  local states
  states="$(sinfo -h -N -o '%N %t' 2>/dev/null)" || return 1
  local n
  for n in "${NODES[@]}"; do
    grep -Eq "^$n (idle|mix|alloc)\$" <<<"$states" || return 1
  done
}

# --- commands --------------------------------------------------------------------------------------------------
cmd_status() {
  local d pid ok=0
  for d in "${DAEMONS[@]}"; do
    pid="$(live_pid "$d")"
    if [[ -n "$pid" ]]; then printf '%-10s running  pid %s\n' "$d" "$pid"
    else printf '%-10s stopped\n' "$d"; ok=3; fi
  done
  if [[ -n "$(live_pid slurmctld)" ]]; then
    timeout 5 sinfo -N -o '%N %P %t %c' 2>&1 || ok=3
  fi
  return $ok
}

cmd_up() {
  local t0; t0=$(now_ms)
  if [[ -f "$H/etc/slurm.conf" ]] && all_running && timeout 5 sinfo -h >/dev/null 2>&1; then
    cmd_status || true
    log "already up ($(( $(now_ms) - t0 ))ms)"
    echo "export SLURM_CONF=$H/etc/slurm.conf"
    return 0
  fi
  [[ "$(uname -s)" == Linux ]] || die "needs Linux"
  [[ "$(id -u)" == 0 ]] || die "needs root (daemons, packages, /etc/hosts)"
  mkdir -p "$H"/{etc,run,log,spool}
  install_packages
  ensure_hosts

  [[ -n "$(live_pid munged)" ]] || start_munged
  [[ -n "$(live_pid mariadbd)" ]] || start_mariadbd
  local fresh=0
  if [[ -z "$(live_pid slurmctld)" ]]; then
    fresh=1
    # slurmd daemons of an earlier controller would keep stale job steps: restart them with it
    local n
    for n in "${NODES[@]}"; do stop_daemon "slurmd-$n"; done
    write_configs "$(next_job_id)"
    rm -rf "$H/state" "$H/spool"; mkdir -p "$H/state" "$H/spool"
  elif [[ ! -f "$H/etc/slurmdbd.conf" ]]; then
    die "slurmctld runs but $H/etc/slurmdbd.conf is missing; run 'down' then 'up'"
  fi
  [[ -n "$(live_pid slurmdbd)" ]] || start_slurmdbd
  [[ -n "$(live_pid slurmctld)" ]] || start_slurmctld
  local n
  for n in "${NODES[@]}"; do [[ -n "$(live_pid "slurmd-$n")" ]] || start_slurmd "$n"; done

  if ! wait_for nodes "$WAIT_IDLE_S" nodes_ready; then
    die "nodes ${NODES[*]} not idle within ${WAIT_IDLE_S}s ($(sinfo -h -N -o '%N=%t' 2>/dev/null | tr '\n' ' ')); see $H/log/slurmctld.log and $H/log/slurmd-n*.log"
  fi
  # a node that was DOWN (e.g. a restarted slurmd) may need a resume; ReturnToService=2 normally handles it
  (( fresh )) && log "fresh cluster (state in $H)"
  # smoke test (prints the host name: all simulated nodes run on this host; SLURMD_NODENAME tells n1 from n2).
  # After a repair the nodes may be busy with someone's jobs: then it is skipped instead of queued behind them.
  local out
  if [[ "$(sinfo -h -N -o %t 2>/dev/null | sort -u)" == idle ]]; then
    out="$(timeout 60 srun -N2 -n2 -l --time=1 hostname 2>&1)" || die "smoke test 'srun -N2 hostname' failed: $out; see $H/log/"
    out="srun -N2 hostname: $(tr '\n' ' ' <<<"$out")"
  else
    out="nodes busy, srun smoke test skipped"
  fi
  cmd_status || true
  log "$out"
  log "up in $(( $(now_ms) - t0 ))ms"
  echo "export SLURM_CONF=$H/etc/slurm.conf"
}

cmd_down() {
  local t0; t0=$(now_ms)
  if [[ -n "$(live_pid slurmctld)" ]]; then
    local ids
    ids="$(timeout 10 squeue -h -o %A 2>/dev/null | tr '\n' ' ' || true)"
    if [[ -n "${ids// }" ]]; then
      log "cancelling jobs: $ids"
      # shellcheck disable=SC2086
      timeout 10 scancel $ids 2>/dev/null || true
      # give slurmd a moment to kill job steps (KillWait=5) before it goes away
      wait_for "jobs gone" 8 test -z "$(squeue -h -t R,CG,PD -o %A 2>/dev/null)" || true
    fi
  fi
  local i
  for ((i = ${#DAEMONS[@]} - 1; i >= 0; i--)); do stop_daemon "${DAEMONS[i]}"; done
  log "down in $(( $(now_ms) - t0 ))ms"
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  restart) cmd_down; cmd_up ;;
  *) echo "usage: $0 up|down|status|restart" >&2; exit 2 ;;
esac
