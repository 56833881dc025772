# accelpipe's TensorFlow stages on NVIDIA GPUs: the official TensorFlow GPU image plus our
# package, installed into the image's own Python (never a second TensorFlow).
# Keras 2 is the API the engine writes to: on TF >= 2.16 the build adds tf-keras of the same
# minor release (--no-deps: it names the `tensorflow` package, whichever build the base has);
# on older TF, tf.keras is Keras 2 already. TensorBoard is added only if the base lacks it.
# Build context: the repository root (.dockerignore keeps it small). For offline or
# air-gapped builds put wheels in docker/wheelhouse/ (the core pins, plus setuptools for
# building /src) and pass PIP_EXTRA_ARGS=--no-index.
# This base has not been pulled or verified here (no registry is reachable from this work).
ARG BASE_IMAGE=docker.io/tensorflow/tensorflow:2.21.0-gpu

FROM ${BASE_IMAGE}
ARG PIP_EXTRA_ARGS=""
# The pinned requirements to install; point it at another file where the pins need changing.
ARG REQUIREMENTS=requirements/core.txt
# What the TensorFlow engine needs besides the vendor's TensorFlow (xprof, pycocotools).
ARG FRAMEWORK_REQUIREMENTS=requirements/tensorflow.txt
# What the cuda backend needs (nvidia-ml-py: NVML, for the energy figures).
ARG BACKEND_REQUIREMENTS=requirements/cuda.txt
# Wheels for offline builds; must lie under docker/wheelhouse/ (.dockerignore passes only that).
ARG WHEELHOUSE=docker/wheelhouse
# The interpreter whose environment holds the vendor's TensorFlow (the system python3).
ARG PYTHON=python3
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MPLCONFIGDIR=/tmp/matplotlib

# Fail early if PYTHON is not the environment that holds the vendor's TensorFlow.
RUN ${PYTHON} -c "import tensorflow as tf; print('vendor tensorflow', tf.__version__)"

# Single stage, as the PyTorch vendor images: pip writes into the base's own site-packages.
COPY ${REQUIREMENTS} /tmp/requirements.txt
COPY ${FRAMEWORK_REQUIREMENTS} /tmp/framework-requirements.txt
COPY ${BACKEND_REQUIREMENTS} /tmp/backend-requirements.txt
COPY ${WHEELHOUSE}/ /tmp/wheelhouse/
RUN ${PYTHON} -m pip install --find-links /tmp/wheelhouse ${PIP_EXTRA_ARGS} \
        -r /tmp/requirements.txt -r /tmp/framework-requirements.txt \
        -r /tmp/backend-requirements.txt \
    && TF_MINOR=$(${PYTHON} -c "import tensorflow as tf; print('.'.join(tf.__version__.split('.')[:2]))") \
    && if ${PYTHON} -c "import sys, tensorflow as tf; sys.exit(int(tf.__version__.split('.')[1]) < 16)"; then \
         ${PYTHON} -m pip install --no-deps --find-links /tmp/wheelhouse ${PIP_EXTRA_ARGS} "tf-keras==${TF_MINOR}.*"; \
       fi \
    && (${PYTHON} -c "import tensorboard" 2>/dev/null \
        || ${PYTHON} -m pip install --find-links /tmp/wheelhouse ${PIP_EXTRA_ARGS} "tensorboard==${TF_MINOR}.*")
COPY pyproject.toml README.md /src/
COPY workflow/ /src/workflow/
RUN ${PYTHON} -m pip install --no-deps --find-links /tmp/wheelhouse ${PIP_EXTRA_ARGS} /src \
    && rm -rf /tmp/wheelhouse /tmp/requirements.txt /tmp/framework-requirements.txt \
        /tmp/backend-requirements.txt /src \
    && ${PYTHON} -c "import numpy, tensorflow, accelpipe.core.keras2" \
    && accelpipe --help >/dev/null

# A non-root default user. uid 1000 is taken in some bases: then the next free uid is used;
# runtimes that map the caller's identity (docker --user uid:gid, Apptainer) override it anyway.
RUN id -u accelpipe >/dev/null 2>&1 \
    || if getent passwd 1000 >/dev/null; then useradd --create-home --user-group accelpipe; \
       else useradd --create-home --uid 1000 --user-group accelpipe; fi
USER accelpipe
WORKDIR /home/accelpipe
CMD ["accelpipe", "--help"]
