#!/usr/bin/env bash
# Install Podman (Debian) and serve its Docker-compatible Engine API on a unix socket.
# Rootful, runc, no default ulimits (what works in this kind of VM). Prints the DOCKER_HOST.
set -euo pipefail
SOCKET=${PODMAN_SOCKET:-/run/podman/podman.sock}

if ! command -v podman >/dev/null || ! command -v debootstrap >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc debootstrap >/dev/null
fi
mkdir -p /etc/containers "$(dirname "$SOCKET")"
if ! grep -q 'runtime = "runc"' /etc/containers/containers.conf 2>/dev/null; then
  printf '[containers]\ndefault_ulimits = []\n\n[engine]\nruntime = "runc"\n' \
    > /etc/containers/containers.conf
fi
if ! curl -sf --unix-socket "$SOCKET" http://d/_ping >/dev/null 2>&1; then
  # From /: conmon inherits the service's working directory, and a deleted one (a removed
  # checkout) makes every later container start fail with "write child: broken pipe".
  env -C / setsid nohup podman system service --time=0 "unix://$SOCKET" \
    >/tmp/podman-service.log 2>&1 &
  for _ in $(seq 100); do
    curl -sf --unix-socket "$SOCKET" http://d/_ping >/dev/null 2>&1 && break
    sleep 0.1
  done
fi
curl -sf --unix-socket "$SOCKET" http://d/_ping >/dev/null
echo "unix://$SOCKET"
