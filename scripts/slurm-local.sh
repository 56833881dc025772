#!/usr/bin/env bash
# A Slurm on this machine, for the slurm-test profile and tests/integration/test_slurm*.py:
# this host as node of partition `debug` (the default), and a cluster of two more nodes,
# partition `two`, for training across a host boundary.
#   scripts/slurm-local.sh start | stop | status
# start: installs Debian's slurm-wlm and munge if missing, writes /etc/slurm/slurm.conf
# (this host's real CPUs and memory, no accounting, no cgroups), runs munged, slurmctld and
# slurmd as plain daemons (no systemd needed) and waits until the nodes are idle. Running it
# again is harmless. Needs root (a CI VM or container with CAP_NET_ADMIN).
# The two nodes ap-n1 and ap-n2 are slurmds in their own network and UTS namespaces: each has
# its hostname and its address (10.77.0.11, .12, in /etc/hosts) on a bridge whose host side
# (10.77.0.1) is where slurmctld answers; they share this machine's filesystem and munge, as
# a cluster's nodes share theirs. Their jobs reach each other only through the bridge, and
# nothing outside this machine. `stop` removes the namespaces, the bridge and the hosts lines.
set -euo pipefail

CONF=/etc/slurm/slurm.conf
LOGDIR=/var/log/slurm
CTLD_PID=/run/slurmctld.pid
SLURMD_PIDS=/run/slurmd-%n.pid # one per node (%n: its name)
LEGACY_SLURMD_PID=/run/slurmd.pid # the single-node script's, stopped on a config change
MUNGE_PID=/run/munge/munged.pid
CLUSTER=accelpipe
PARTITION=debug
# The two-node cluster: names, addresses, the bridge and the host's address on it.
PAIR_PARTITION=two
PAIR_NODES=(ap-n1 ap-n2)
PAIR_SUBNET=10.77.0
BRIDGE=apbr0
HOSTS_MARK="# slurm-local two-node cluster"

pair_addr() { # node index (0, 1) -> its address
	echo "$PAIR_SUBNET.$((11 + $1))"
}

slurmd_pid() { # node name -> its slurmd pid file
	echo "${SLURMD_PIDS//%n/$1}"
}

die() {
	echo "slurm-local: $*" >&2
	exit 1
}

running() { # pidfile -> is that process alive?
	[[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

install_packages() {
	command -v slurmctld >/dev/null && command -v slurmd >/dev/null &&
		command -v munged >/dev/null && command -v sinfo >/dev/null &&
		command -v ip >/dev/null && return
	[[ $(id -u) == 0 ]] || die "slurm-wlm/munge missing and not root: cannot install them"
	export DEBIAN_FRONTEND=noninteractive
	# policy-rc.d keeps the packages' init scripts from starting daemons we then fight with.
	local policy=/usr/sbin/policy-rc.d created_policy=
	if [[ ! -e $policy ]]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && created_policy=1
	fi
	local log rc=0
	log=$(mktemp)
	{ apt-get update -qq && apt-get install -y -qq --no-install-recommends slurm-wlm munge iproute2; } \
		>"$log" 2>&1 || rc=$?
	[[ -n $created_policy ]] && rm -f "$policy"
	if ((rc != 0)); then
		cat "$log" >&2
		die "installing slurm-wlm, munge and iproute2 failed"
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
# Written by scripts/slurm-local.sh: a test cluster on one machine, not a production setup.
ClusterName=$CLUSTER
# The bridge's host side: the nodes in their namespaces reach it, and so does this host.
SlurmctldHost=$host($PAIR_SUBNET.1)
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
SlurmdSpoolDir=/var/spool/slurmd/%n
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PIDS
SlurmctldLogFile=$LOGDIR/slurmctld.log
SlurmdLogFile=$LOGDIR/slurmd-%n.log
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus SocketsPerBoard=$sockets CoresPerSocket=$cores ThreadsPerCore=$threads RealMemory=$mem State=UNKNOWN
NodeName=${PAIR_NODES[0]} NodeAddr=$(pair_addr 0) CPUs=$cpus SocketsPerBoard=$sockets CoresPerSocket=$cores ThreadsPerCore=$threads RealMemory=$mem State=UNKNOWN
NodeName=${PAIR_NODES[1]} NodeAddr=$(pair_addr 1) CPUs=$cpus SocketsPerBoard=$sockets CoresPerSocket=$cores ThreadsPerCore=$threads RealMemory=$mem State=UNKNOWN
PartitionName=$PARTITION Nodes=$host Default=YES MaxTime=INFINITE State=UP
PartitionName=$PAIR_PARTITION Nodes=${PAIR_NODES[0]},${PAIR_NODES[1]} Default=NO MaxTime=INFINITE State=UP
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

nodes() { # every node's name: this host's, then the pair's
	echo "$(hostname -s)" "${PAIR_NODES[@]}"
}

node_states() { # "name state" per node
	sinfo -h -N -o "%N %T" 2>/dev/null
}

fail_with_logs() {
	echo "slurm-local: $*" >&2
	local log
	for log in "$LOGDIR/slurmctld.log" "$LOGDIR"/slurmd-*.log; do
		[[ -f $log ]] && {
			echo "--- tail $log" >&2
			tail -n 25 "$log" >&2
		}
	done
	exit 1
}

start_network() { # the bridge, a namespace per pair node and their hosts lines (idempotent)
	if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
		ip link add "$BRIDGE" type bridge
		ip addr add "$PAIR_SUBNET.1/24" dev "$BRIDGE"
	fi
	ip link set "$BRIDGE" up
	local i node addr
	for i in "${!PAIR_NODES[@]}"; do
		node=${PAIR_NODES[$i]} addr=$(pair_addr "$i")
		if ! ip netns list | grep -qw "^$node"; then
			ip netns add "$node"
			ip link add "ve-$node" type veth peer name eth0 netns "$node"
			ip link set "ve-$node" master "$BRIDGE" up
			ip -n "$node" addr add "$addr/24" dev eth0
			ip -n "$node" link set eth0 up
			ip -n "$node" link set lo up
		fi
	done
	if ! grep -q "$HOSTS_MARK" /etc/hosts; then
		{
			echo "$HOSTS_MARK"
			for i in "${!PAIR_NODES[@]}"; do
				echo "$(pair_addr "$i") ${PAIR_NODES[$i]}"
			done
		} >>/etc/hosts
	fi
}

stop_network() {
	local node
	for node in "${PAIR_NODES[@]}"; do
		ip netns del "$node" 2>/dev/null || true # takes its veth pair with it
	done
	ip link del "$BRIDGE" 2>/dev/null || true
	# the mark and the lines after it; rewritten in place (/etc/hosts may be a bind mount)
	local kept
	kept=$(sed "/^$HOSTS_MARK\$/,+${#PAIR_NODES[@]}d" /etc/hosts)
	printf '%s\n' "$kept" >/etc/hosts
}

start_slurmd() { # node name: this host's slurmd, or a pair node's in its namespaces
	local node=$1
	running "$(slurmd_pid "$node")" && return
	install -d -m 0755 "/var/spool/slurmd/$node"
	if [[ $node == "$(hostname -s)" ]]; then
		slurmd -N "$node"
	else # its own network and hostname: its jobs see a host named as the node. nsenter, not
		# `ip netns exec`: that remounts /sys for the namespace, and slurmd then finds no cgroup fs
		nsenter --net="/run/netns/$node" unshare --uts \
			sh -c 'hostname "$1" && exec slurmd -N "$1"' _ "$node"
	fi
}

cmd_start() {
	[[ $(id -u) == 0 ]] || die "start needs root (it writes /etc/slurm and runs the daemons)"
	install_packages
	local changed node
	start_network
	changed=$(write_config)
	install -d -m 0755 "$LOGDIR" /var/spool/slurmctld /var/spool/slurmd
	start_munge
	if [[ -n $changed ]]; then # a new config: restart whatever runs with the old one
		stop_daemon "$LEGACY_SLURMD_PID"
		for node in $(nodes); do
			stop_daemon "$(slurmd_pid "$node")"
		done
		stop_daemon "$CTLD_PID"
	fi
	running "$CTLD_PID" || slurmctld || fail_with_logs "slurmctld did not start"
	for node in $(nodes); do
		start_slurmd "$node" || fail_with_logs "slurmd of $node did not start"
	done
	# The daemons fork before they write their pid files.
	wait_running "$CTLD_PID" || fail_with_logs "slurmctld wrote no pid file within 30 s"
	for node in $(nodes); do
		wait_running "$(slurmd_pid "$node")" ||
			fail_with_logs "slurmd of $node wrote no pid file within 30 s"
	done
	local states idle
	for _ in $(seq 300); do # up to 30 s; usually ~1 s
		running "$CTLD_PID" || fail_with_logs "slurmctld exited"
		for node in $(nodes); do
			running "$(slurmd_pid "$node")" || fail_with_logs "slurmd of $node exited"
		done
		states=$(node_states) idle=0
		while read -r node state; do
			case $state in
			idle | mixed | allocated | completing) idle=$((idle + 1)) ;;
			drained* | draining | down*)
				# e.g. left down by a previous stop; ReturnToService=2 covers most cases
				scontrol update nodename="$node" state=resume 2>/dev/null || true
				;;
			esac
		done <<<"$states"
		((idle == $(nodes | wc -w))) && return 0
		sleep 0.1
	done
	fail_with_logs "nodes not idle after 30 s (sinfo: $(tr '\n' ' ' <<<"$states"))"
}

cmd_stop() {
	local node
	for node in $(nodes); do
		stop_daemon "$(slurmd_pid "$node")"
	done
	stop_daemon "$LEGACY_SLURMD_PID"
	stop_daemon "$CTLD_PID"
	stop_daemon "$MUNGE_PID"
	stop_network
}

cmd_status() {
	local node
	running "$CTLD_PID" || {
		echo "slurm-local: not running" >&2
		return 1
	}
	for node in $(nodes); do
		running "$(slurmd_pid "$node")" || {
			echo "slurm-local: slurmd of $node not running" >&2
			return 1
		}
	done
	sinfo -N -o "%N %P %T %c %m"
	! node_states | grep -qvE ' (idle|mixed|allocated|completing)$'
}

case ${1:-} in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
*) die "usage: $0 start|stop|status" ;;
esac
