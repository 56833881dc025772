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
# An earlier accelpipe is the one package this may replace.
"$python" -m pip list --format=freeze --exclude accelpipe > "$constraints"
keras=""
if ls "$here" | grep -q '^tf_keras-'; then
    # Keras 2 must be the release of the environment's TensorFlow (on 2.15 tf.keras is Keras 2).
    release=$("$python" -c 'import tensorflow as tf; print(".".join(tf.__version__.split(".")[:2]))')
    [ "$release" != 2.15 ] && keras="tf-keras==$release.*"
fi
"$python" -m pip install --no-index --find-links "$here" --constraint "$constraints" \
    --requirement "$here/requirements.txt"
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
