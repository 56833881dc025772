#!/usr/bin/env bash
# A local base image for the cpu-pytorch Dockerfile, made from Debian's own packages:
# debootstrap bookworm (Python 3.11, like PyTorch's cp311 CPU wheel) and `podman import`.
# For machines that can reach Debian but no container registry (CI, air-gapped sites).
set -euo pipefail
IMAGE=${1:-localhost/accelpipe-base:bookworm-py311}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

if podman image exists "$IMAGE"; then
  echo "$IMAGE"
  exit 0
fi
rootfs=$(mktemp -d)
trap 'rm -rf "$rootfs"' EXIT
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
  bookworm "$rootfs" "$MIRROR" >/tmp/debootstrap.log 2>&1
tar -C "$rootfs" -c . | podman import --quiet - "$IMAGE" >/dev/null
echo "$IMAGE"
