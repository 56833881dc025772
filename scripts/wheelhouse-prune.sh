#!/usr/bin/env bash
# Removes from a wheelhouse the wheels of packages the node already holds: its install.sh pins
# every package of the node's environment as a constraint, so those wheels are never installed
# and only make the folder to carry bigger (a Python 3.12 torch wheelhouse is ~146 MB whole,
# ~38 MiB for the lent H100 image's environment). accelpipe's own wheel always stays.
#
#   scripts/wheelhouse-prune.sh WHEELHOUSE NODE_PACKAGES
#
# NODE_PACKAGES: the node's `pip list --format=freeze` (or one name a line).
set -euo pipefail
wheelhouse=$1 node_packages=$2
normalize() { sed 's/[<>=!~ ;[@].*//; s/[-_.]\+/-/g' | tr 'A-Z' 'a-z'; }
held=$(grep -v '^\s*#' "$node_packages" | normalize | grep -v '^accelpipe$' || true)
removed=0
for wheel in "$wheelhouse"/*.whl; do
    [ -e "$wheel" ] || continue
    # a wheel's file name is <name>-<version>-...: its name ends at the first "-<digit>"
    name=$(basename "$wheel" | sed 's/-[0-9].*//' | normalize)
    if grep -qxF -- "$name" <<<"$held"; then rm -- "$wheel"; removed=$((removed + 1)); fi
done
echo "$wheelhouse: left out $removed wheels of packages $node_packages holds"
