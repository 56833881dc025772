#!/usr/bin/env bash
# A single-node Slurm on this machine, for the slurm-test profile and
# tests/integration/test_slurm.py.
#   scripts/slurm-local.sh start | stop | status
# start: installs Debian's slurm-wlm and munge if missing, writes /etc/slurm/slurm.conf
# (this host's real CPUs and memory, one partition `debug`, no accounting, no cgroups),
# runs munged, slurmctld and slurmd as plain daemons (no systemd needed) and waits until
# the node is idle. Running it again is harmless. Needs root (a CI VM or container).
set -euo pipefail

CONF=/etc/slurm/slurm.conf
LOGDIR=/var/log/slurm
CTLD_PID=/run/slurmctld.pid
SLURMD_PID=/run/slurmd.pid
MUNGE_PID=/run/munge/munged.pid
CLUSTER=accelpipe
PARTITION=debug

die() {
	echo "slurm-local: $*" >&2
	exit 1
}

running() { # pidfile -> is that process alive?
	[[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

install_packages() {
	command -v slurmctld >/dev/null && command -v slurmd >/dev/null &&
		command -v munged >/dev/null && command -v sinfo >/dev/null && return
	[[ $(id -u) == 0 ]] || die "slurm-wlm/munge missing and not root: cannot install them"
	export DEBIAN_FRONTEND=noninteractive
	# policy-rc.d keeps the packages' init scripts from starting daemons we then fight with.
	local policy=/usr/sbin/policy-rc.d created_policy=
	if [[ ! -e $policy ]]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && created_policy=1
	fi
	local log rc=0
	log=$(mktemp)
	{ apt-get update -qq && apt-get install -y -qq --no-install-recommends slurm-wlm munge; } \
		>"$log" 2>&1 || rc=$?
	[[ -n $created_policy ]] && rm -f "$policy"
	if ((rc != 0)); then
		cat "$log" >&2
		die "installing slurm-wlm and munge failed"
	fi
	rm -f "$log"
}

write_config() { # -> prints "changed" when slurm.conf was (re)written
	local host node mem cpus sockets cores threads tmp
	host=$(hostname -s)
	# slurmd -C reports the hardware as slurmd itself will see it, so the node never
	# gets drained for "Low RealMemory" or a CPU count mismatch.
	node=$(slurmd -C | head -n1)
	cpus=$(sed -n 's/.* CPUs=\([0-9]*\).*/\1/p' <<<"$node")
	sockets=$(sed -n 's/.*SocketsPerBoard=\([0-9]*\).*/\1/p' <<<"$node")
	cores=$(sed -n 's/.*CoresPerSocket=\([0-9]*\).*/\1/p' <<<"$node")
	threads=$(sed -n 's/.*ThreadsPerCore=\([0-9]*\).*/\1/p' <<<"$node")
	mem=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$node")
	[[ -n $cpus && -n $mem ]] || die "cannot read the hardware from 'slurmd -C': $node"
	mkdir -p /etc/slurm
	tmp=$(mktemp)
	cat >"$tmp" <<EOF
# Written by scripts/slurm-local.sh: a single-node test cluster, not a production setup.
ClusterName=$CLUSTER
# 127.0.0.1: works whether or not the hostname resolves (fresh VMs, containers).
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
MpiDefault=none
MailProg=/bin/true
# No cgroups: they may be unavailable or read-only here (containers, CI VMs).
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# No slurmdbd: sacct cannot answer; Snakemake's slurm plugin polls squeue instead, which
# keeps a finished job visible for MinJobAge seconds (the plugin wants >= 3x its interval).
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MinJobAge=300
# A node that was down (daemons restarted, machine rebooted) comes back by itself.
ReturnToService=2
# scancel: SIGKILL 5 s after SIGTERM (default 30) keeps cancelled test jobs short.
KillWait=5
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PID
SlurmctldLogFile=$LOGDIR/slurmctld.log
SlurmdLogFile=$LOGDIR/slurmd.log
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus SocketsPerBoard=$sockets CoresPerSocket=$cores ThreadsPerCore=$threads RealMemory=$mem State=UNKNOWN
PartitionName=$PARTITION Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
	if cmp -s "$tmp" "$CONF"; then
		rm -f "$tmp"
	else
		install -m 0644 "$tmp" "$CONF" && rm -f "$tmp"
		echo changed
	fi
}

start_munge() {
	running "$MUNGE_PID" && return
	if [[ ! -s /etc/munge/munge.key ]]; then
		mkdir -p /etc/munge
		mungekey --create --keyfile /etc/munge/munge.key 2>/dev/null ||
			dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
	fi
	chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
	install -d -o munge -g munge -m 0755 /run/munge /var/lib/munge /var/log/munge
	runuser -u munge -- /usr/sbin/munged || die "munged did not start"
}

stop_daemon() { # pidfile
	running "$1" || return 0
	local pid
	pid=$(cat "$1")
	kill "$pid" 2>/dev/null || true
	for _ in $(seq 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -9 "$pid" 2>/dev/null || true
	rm -f "$1"
}

wait_running() { # pidfile -> up to 30 s for the daemon to be up (slurmd can wait on a
	# slurmctld that is still starting before it forks; 5 s was once too short here)
	for _ in $(seq 300); do
		running "$1" && return 0
		sleep 0.1
	done
	return 1
}

node_state() {
	sinfo -h -N -p "$PARTITION" -o %T 2>/dev/null | head -n1
}

fail_with_logs() {
	echo "slurm-local: $*" >&2
	for log in "$LOGDIR/slurmctld.log" "$LOGDIR/slurmd.log"; do
		[[ -f $log ]] && {
			echo "--- tail $log" >&2
			tail -n 25 "$log" >&2
		}
	done
	exit 1
}

cmd_start() {
	[[ $(id -u) == 0 ]] || die "start needs root (it writes /etc/slurm and runs the daemons)"
	install_packages
	local changed
	changed=$(write_config)
	install -d -m 0755 "$LOGDIR" /var/spool/slurmctld /var/spool/slurmd
	start_munge
	if [[ -n $changed ]]; then # a new config: restart whatever runs with the old one
		stop_daemon "$SLURMD_PID"
		stop_daemon "$CTLD_PID"
	fi
	running "$CTLD_PID" || slurmctld || fail_with_logs "slurmctld did not start"
	running "$SLURMD_PID" || slurmd || fail_with_logs "slurmd did not start"
	# The daemons fork before they write their pid files.
	wait_running "$CTLD_PID" || fail_with_logs "slurmctld wrote no pid file within 30 s"
	wait_running "$SLURMD_PID" || fail_with_logs "slurmd wrote no pid file within 30 s"
	local state=
	for _ in $(seq 300); do # up to 30 s; usually ~1 s
		running "$CTLD_PID" || fail_with_logs "slurmctld exited"
		running "$SLURMD_PID" || fail_with_logs "slurmd exited"
		state=$(node_state)
		case $state in
		idle | mixed | allocated | completing) return 0 ;;
		drained* | draining | down*)
			# e.g. left down by a previous stop; ReturnToService=2 covers most cases
			scontrol update nodename="$(hostname -s)" state=resume 2>/dev/null || true
			;;
		esac
		sleep 0.1
	done
	fail_with_logs "node not idle after 30 s (sinfo state: '${state:-none}')"
}

cmd_stop() {
	stop_daemon "$SLURMD_PID"
	stop_daemon "$CTLD_PID"
	stop_daemon "$MUNGE_PID"
}

cmd_status() {
	if running "$CTLD_PID" && running "$SLURMD_PID"; then
		sinfo -N -o "%N %P %T %c %m"
		[[ $(node_state) =~ ^(idle|mixed|allocated|completing)$ ]]
	else
		echo "slurm-local: not running" >&2
		return 1
	fi
}

case ${1:-} in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
*) die "usage: $0 start|stop|status" ;;
esac
