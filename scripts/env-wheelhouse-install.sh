#!/bin/sh
# Installs accelpipe from this wheelhouse into the environment of $PYTHON (default: python3),
# with no package index, leaving every package that environment already holds as it is: its
# framework (a vendor's CUDA, ROCm or Gaudi build of torch or TensorFlow), numpy and the rest
# are pinned as constraints, so pip adds what is missing and fails rather than replacing one.
# Made by scripts/env-wheelhouse.sh, which copies it into the wheelhouse as install.sh.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python3}
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
# An earlier accelpipe may be replaced, and the held packages that env-wheelhouse.sh found a
# requirement excludes (replaces.txt: their wheels are here).
"$python" -m pip list --format=freeze --exclude accelpipe > "$constraints"
if [ -s "$here/replaces.txt" ]; then
    while read -r name; do
        # pip list's names may differ from the normalized ones in case and in '-', '_' and '.'
        line="^$(printf '%s' "$name" | sed 's/-/[-_.]/g')=="
        held=$(grep -iE "$line" "$constraints" || true)
        [ -z "$held" ] || echo "install.sh: replacing $held: accelpipe's requirements exclude it"
        grep -viE "$line" "$constraints" > "$constraints.kept" || true
        mv "$constraints.kept" "$constraints"
    done < "$here/replaces.txt"
fi
keras=""
if ls "$here" | grep -q '^tf_keras-'; then
    # Keras 2 must be the release of the environment's TensorFlow (on 2.15 tf.keras is Keras 2).
    release=$("$python" -c 'import tensorflow as tf; print(".".join(tf.__version__.split(".")[:2]))')
    [ "$release" != 2.15 ] && keras="tf-keras==$release.*"
fi
"$python" -m pip install --no-index --find-links "$here" --constraint "$constraints" \
    --requirement "$here/requirements.txt"
# accelpipe's own wheel, even over an installed accelpipe of the same version number (a newer
# checkout's wheel keeps the number; pip would call it satisfied and keep the old code).
"$python" -m pip install --no-index --no-deps --force-reinstall "$here"/accelpipe-*.whl
# tf-keras requires the `tensorflow` distribution by name, which tensorflow-cpu and vendor
# builds (tensorflow-rocm, Habana's) are not: it goes in without its dependencies.
[ -z "$keras" ] || "$python" -m pip install --no-index --find-links "$here" --no-deps "$keras"
# The check every stage makes: the environment's framework is in accelpipe's supported range.
"$python" - <<'EOF'
import importlib
import importlib.util
import sys

from accelpipe.devices.frameworks import check_supported

for framework, module in (("pytorch", "torch"), ("tensorflow", "tensorflow")):
    if importlib.util.find_spec(module) is not None:
        version = importlib.import_module(module).__version__
        check_supported(framework, version)
        print(f"accelpipe installed in {sys.prefix} beside {module} {version}")
EOF
