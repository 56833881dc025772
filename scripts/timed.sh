#!/usr/bin/env bash
# The phases of `make test`, each timed: `scripts/timed.sh START NAME COMMAND...` prints
# "== NAME: COMMAND", runs COMMAND, then prints "== NAME: 12.3 s (make test so far: 45.6 s)"
# and exits with COMMAND's status, so a failing phase still stops make.
# `scripts/timed.sh START NAME` alone prints the total since START.
# START: nanoseconds since the epoch (`date +%s%N`). Bash and coreutils only.
set -u
start_ns=$1
name=$2
shift 2

seconds_since() { # nanoseconds since the epoch -> "12.3" seconds until now
    local tenths=$((($(date +%s%N) - $1) / 100000000))
    echo "$((tenths / 10)).$((tenths % 10))"
}

if (($# == 0)); then
    echo "== $name: $(seconds_since "$start_ns") s in all"
    exit 0
fi
echo "== $name: $*"
phase_ns=$(date +%s%N)
status=0
"$@" || status=$?
verdict=""
((status == 0)) || verdict=", failed with status $status"
echo "== $name: $(seconds_since "$phase_ns") s$verdict (make test so far: $(seconds_since "$start_ns") s)"
exit "$status"
