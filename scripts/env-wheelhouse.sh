#!/usr/bin/env bash
# A wheelhouse that installs accelpipe offline into an environment that already holds its
# framework: a vendor container, or an air-gapped cluster's Python with a torch or TensorFlow
# built for its devices. It holds every wheel accelpipe, the framework's engine and (Python
# >= 3.11) Snakemake need for the target Python and platform, except the framework itself,
# plus install.sh, which installs them into the current environment with that environment's
# packages as constraints, so the installed framework (and its numpy) stay as they are.
#
#   scripts/env-wheelhouse.sh PYTHON_VERSION FRAMEWORK OUT [PLATFORM]
#   e.g. scripts/env-wheelhouse.sh 3.12 torch wheelhouse/py3.12-torch
#
# CONSTRAINTS (optional): the node's `pip list --format=freeze`, so that the wheels resolve
# against what it holds; TensorFlow <= 2.17 pins protobuf < 5, which the newest Google Cloud
# libraries under xprof do not accept, so a TF node needs it.
# FRAMEWORK: torch | tensorflow. PLATFORM: the machine (default x86_64); GLIBC_MINOR: the node's
# glibc 2.x (default 35).
# Run on a machine that reaches the package index; copy OUT to the node and run OUT/install.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
python_version=$1 framework=$2 out=$3 platform=${4:-x86_64}
# A Python of the target's version: pip evaluates markers with the one it runs on.
python=${PYTHON:-python$python_version}
"$python" -c "import sys; assert sys.version.startswith('$python_version.'), sys.version" || {
    echo "env-wheelhouse: PYTHON=$python is not Python $python_version" >&2; exit 2; }

case "$framework" in
    # Packages that require the framework (monai needs torch, tf-keras needs tensorflow) are
    # fetched without their dependencies; the rest with theirs.
    torch)
        engine_requirements=requirements/torch.txt engine="monai einops tensorboard"
        no_deps=("monai==$(sed -n 's/^monai==//p' requirements/torch.txt)") ;;
    tensorflow)
        engine_requirements=requirements/tensorflow.txt engine="xprof pycocotools google-crc32c"
        # Keras 2 for every supported TF >= 2.16 (on 2.15 tf.keras is Keras 2): install.sh
        # picks the one that matches the environment's TensorFlow.
        no_deps=(tf-keras==2.16.0 tf-keras==2.17.0 tf-keras==2.18.0 tf-keras==2.19.0
                 tf-keras==2.20.1 tf-keras==2.21.0) ;;
    *) echo "env-wheelhouse: FRAMEWORK must be torch or tensorflow, not '$framework'" >&2; exit 2 ;;
esac
# numpy >= 2.3 and matplotlib 3.11 have no Python 3.10 wheels (core-py310.txt's pins).
core=requirements/core.txt
[ "$python_version" = 3.10 ] && core=requirements/core-py310.txt
requirements=("$core" "$engine_requirements")
top_level="accelpipe $engine"
if [ "$python_version" != 3.10 ]; then  # Snakemake 9 needs Python >= 3.11
    requirements+=(requirements/workflow.txt)
    top_level="$top_level $(grep -o '^[A-Za-z0-9_.-]*' requirements/workflow.txt | tr '\n' ' ')"
fi

mkdir -p "$out"
# With the node's packages as constraints, its versions replace our pins of the same packages.
constraints=() pins=$(mktemp) node=$(mktemp)
trap 'rm -f "$pins" "$node"' EXIT
normalize() { sed 's/[<>=!~ ;[].*//; s/[-_.]\+/-/g' | tr 'A-Z' 'a-z'; }
: > "$out/replaces.txt"
if [ -n "${CONSTRAINTS:-}" ]; then
    grep -v '^\s*#' "$CONSTRAINTS" > "$node"
    constraints=(--constraint "$node")
    held=$(normalize < "$node")
    while read -r line; do
        name=$(normalize <<<"$line")
        if grep -qxF -- "$name" <<<"$held"; then echo "$name"; else echo "$line"; fi
    done < <(grep -hv '^\s*#' "${requirements[@]}" | grep -v '^monai==' | grep .) > "$pins"
else
    grep -hv '^monai==' "${requirements[@]}" > "$pins"
fi
# Every manylinux tag the node's glibc accepts (default 2.35: Ubuntu 22.04, the vendor images'
# base; some wheels, xprof's among them, exist for 2.27 only).
target=(--only-binary=:all: --python-version "$python_version" --implementation cp
        --platform "manylinux2014_$platform" --platform "linux_$platform")
for minor in $(seq 17 "${GLIBC_MINOR:-35}"); do target+=(--platform "manylinux_2_${minor}_$platform"); done
# monai's line in torch.txt is fetched again below without deps; here it would pull torch.
# A dependency published only as an sdist (Snakemake's connection_pool) is built here into
# a wheel, which must be pure Python to serve the target, and the download is tried again.
# A held version that a requirement excludes (the lent image's packaging 26 under Snakemake's
# packaging < 26) is left out of the constraints and named in replaces.txt: install.sh lets pip
# replace it. Never the framework or numpy.
for _ in $(seq 16); do
    log=$("$python" -m pip download --dest "$out" --find-links "$out" "${target[@]}" \
        "${constraints[@]}" -r "$pins" 2>&1) && break
    conflict=$(sed -n 's/^ *The user requested (constraint) \([^=<>!~ ]*\)==.*/\1/p' <<<"$log" \
        | head -1)
    if [ -n "$conflict" ]; then
        name=$(normalize <<<"$conflict")
        if grep -qE '^(torch|tensorflow.*|numpy|triton|jax|jaxlib|nvidia-.*|habana.*)$' <<<"$name"; then
            echo "$log" >&2
            echo "env-wheelhouse: the node's $conflict conflicts with accelpipe's requirements" >&2
            exit 1
        fi
        echo "env-wheelhouse: the node's $(grep -i "^$conflict==" "$node") is excluded by a requirement; install.sh will replace it"
        grep -iv "^$conflict==" "$node" > "$node.next" && mv "$node.next" "$node"
        echo "$name" >> "$out/replaces.txt"
        continue
    fi
    sdist_only=$(sed -n 's/^ERROR: No matching distribution found for \([^ ]*\).*/\1/p' <<<"$log")
    [ -n "$sdist_only" ] || { echo "$log" >&2; exit 1; }
    "$python" -m pip wheel --quiet --no-deps --wheel-dir "$out" "$sdist_only"
    if ls "$out" | grep -E '\.whl$' | grep -vE -- '-(py3|py2\.py3)-none-any\.whl$' \
        | grep -qiE "^$(sed 's/[<>=!~ ].*//; s/[-_.]/[-_.]/g' <<<"$sdist_only")-"; then
        echo "env-wheelhouse: $sdist_only has no wheel for the target and is not pure Python" >&2
        exit 1
    fi
done
for requirement in "${no_deps[@]}"; do  # one at a time: the tf-keras releases exclude each other
    "$python" -m pip download --quiet --no-deps --dest "$out" "${target[@]}" "$requirement"
done
# From a copy of what the package is made of, as the images do: setuptools' build/ folder in
# the checkout would carry modules deleted since into the wheel.
source=$(mktemp -d)
trap 'rm -rf "$pins" "$node" "$source"' EXIT
cp -r pyproject.toml README.md workflow "$source/"
"$python" -m pip wheel --quiet --no-deps --wheel-dir "$out" "$source"
# Nothing that could replace the environment's framework may lie in the wheelhouse.
if ls "$out" | grep -qiE '^(torch|tensorflow|tensorflow_cpu|nvidia_|triton)-'; then
    echo "env-wheelhouse: a framework wheel reached $out; it would replace the installed one" >&2
    exit 1
fi
# PRUNE_HELD=1: CONSTRAINTS lists what the node holds, and install.sh pins it, so those wheels
# are left out. Only then: a list of more than the node holds would leave needed wheels out.
if [ -n "${PRUNE_HELD:-}" ]; then
    [ -n "${CONSTRAINTS:-}" ] || { echo "env-wheelhouse: PRUNE_HELD needs CONSTRAINTS" >&2; exit 2; }
    bash scripts/wheelhouse-prune.sh "$out" "$node"
fi
printf '%s\n' $top_level > "$out/requirements.txt"
cp scripts/env-wheelhouse-install.sh "$out/install.sh"
chmod +x "$out/install.sh"
echo "$out: $(ls "$out"/*.whl | wc -l) wheels for Python $python_version ($framework); install with: $out/install.sh"
