# accelpipe on NVIDIA GPUs: the official PyTorch CUDA runtime image plus our package.
# The base brings Python 3.11 in a conda environment (/opt/conda) with its CUDA build of
# PyTorch; we install only requirements/core.txt, torch.txt, cuda.txt and accelpipe into that
# same environment (never torch, never a second venv: the vendor's torch must stay the one
# that is imported).
# Build context: the repository root (.dockerignore keeps it small). For offline or
# air-gapped builds put wheels in docker/wheelhouse/ (the core pins, plus setuptools for
# building /src) and pass PIP_EXTRA_ARGS=--no-index.
ARG BASE_IMAGE=docker.io/pytorch/pytorch:2.6.0-cuda12.4-cudnn9-runtime

FROM ${BASE_IMAGE}
ARG PIP_EXTRA_ARGS=""
# The pinned requirements to install; point it at another file where the pins need changing.
ARG REQUIREMENTS=requirements/core.txt
# What the PyTorch engine needs besides the vendor's torch (MONAI, einops).
ARG FRAMEWORK_REQUIREMENTS=requirements/torch.txt
# What the cuda backend needs (nvidia-ml-py: NVML, for the energy figures).
ARG BACKEND_REQUIREMENTS=requirements/cuda.txt
# Wheels for offline builds; must lie under docker/wheelhouse/ (.dockerignore passes only that).
ARG WHEELHOUSE=docker/wheelhouse
# The interpreter whose environment holds the vendor's torch (conda's, first on PATH).
ARG PYTHON=python3
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MPLCONFIGDIR=/tmp/matplotlib

# Fail early if PYTHON is not the environment that holds the vendor's torch.
RUN ${PYTHON} -c "import torch; print('vendor torch', torch.__version__)"

# Single stage: pip has to write into the base's own site-packages, which a multi-stage
# build cannot copy back without duplicating the whole (multi-GB) environment. So the
# wheelhouse is COPYed here and deleted by the last RUN that uses it: it is gone from the
# final filesystem, but its COPY layer still carries its bytes. That is nothing for online
# builds (empty wheelhouse); an offline set shared with the CPU image is ~240 MB (its torch
# CPU wheel alone ~190 MB), so give this image its own subdirectory via WHEELHOUSE, holding
# only the wheels it needs. BuildKit's RUN --mount=type=bind would avoid the layer, but the
# Engine API's classic builder that accelpipe builds with (docker-py) does not support it.
COPY ${REQUIREMENTS} /tmp/requirements.txt
COPY ${FRAMEWORK_REQUIREMENTS} /tmp/framework-requirements.txt
COPY ${BACKEND_REQUIREMENTS} /tmp/backend-requirements.txt
COPY ${WHEELHOUSE}/ /tmp/wheelhouse/
RUN ${PYTHON} -m pip install --find-links /tmp/wheelhouse ${PIP_EXTRA_ARGS} \
        -r /tmp/requirements.txt -r /tmp/framework-requirements.txt \
        -r /tmp/backend-requirements.txt
COPY pyproject.toml README.md /src/
COPY workflow/ /src/workflow/
RUN ${PYTHON} -m pip install --no-deps --find-links /tmp/wheelhouse ${PIP_EXTRA_ARGS} /src \
    && rm -rf /tmp/wheelhouse /tmp/requirements.txt /tmp/framework-requirements.txt \
        /tmp/backend-requirements.txt /src \
    && ${PYTHON} -c "import numpy, torch, monai, accelpipe" \
    && accelpipe --help >/dev/null

# A non-root default user. uid 1000 is taken in some bases: then the next free uid is used;
# runtimes that map the caller's identity (docker --user uid:gid, Apptainer) override it anyway.
RUN id -u accelpipe >/dev/null 2>&1 \
    || if getent passwd 1000 >/dev/null; then useradd --create-home --user-group accelpipe; \
       else useradd --create-home --uid 1000 --user-group accelpipe; fi
USER accelpipe
WORKDIR /home/accelpipe
CMD ["accelpipe", "--help"]
