# accelpipe on Intel Gaudi (HPU): Habana's PyTorch installer image plus our package.
# The base brings Ubuntu 22.04's system Python 3.10 with Habana's PyTorch build and
# habana_frameworks; we install only the core requirements and accelpipe
# into that same environment (never torch, never a second venv: the vendor's torch must stay
# the one that is imported).
# Python 3.10: requirements/core.txt pins numpy 2.4.6 and matplotlib 3.11.2, which have no
# 3.10 wheels (numpy >= 2.3 needs Python >= 3.11), so this image installs
# requirements/core-py310.txt (numpy 2.2.6, matplotlib 3.10.9, the rest as core.txt).
# An offline wheelhouse for this image needs cp310 wheels (see WHEELHOUSE). Replacing the
# base's numpy may break vendor extensions built against numpy 1.x: the build imports
# torch afterwards, but check the vendor's other packages when changing the pin.
# Build context: the repository root (.dockerignore keeps it small). For offline or
# air-gapped builds put wheels in docker/wheelhouse/ (the core pins, plus setuptools for
# building /src) and pass PIP_EXTRA_ARGS=--no-index.
# Run (docker): --runtime=habana -e HABANA_VISIBLE_MODULES=... (or HABANA_VISIBLE_DEVICES)
# --cap-add=sys_nice --ipc=host.
# Base tag: Habana publishes `:latest` per release; we pin the 1.21.0-555 build instead. The
# SynapseAI release in the image must match the host's habanalabs driver: change the tag with
# the driver. This tag has not been pulled or verified here.
ARG BASE_IMAGE=vault.habana.ai/gaudi-docker/1.21.0/ubuntu22.04/habanalabs/pytorch-installer-2.6.0:1.21.0-555

FROM ${BASE_IMAGE}
ARG PIP_EXTRA_ARGS=""
# The pinned requirements to install; point it at another file where the pins need changing.
ARG REQUIREMENTS=requirements/core-py310.txt
# What the PyTorch engine needs besides the vendor's torch (MONAI, einops).
ARG FRAMEWORK_REQUIREMENTS=requirements/torch.txt
# Wheels for offline builds; must lie under docker/wheelhouse/ (.dockerignore passes only that).
ARG WHEELHOUSE=docker/wheelhouse
# The interpreter whose environment holds the vendor's torch (the system python3).
ARG PYTHON=python3
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MPLCONFIGDIR=/tmp/matplotlib
# accelpipe drives Gaudi in lazy mode (htcore.mark_step after backward and after step). Habana's
# logs default to /var/log/habana_logs, which neither a non-root user nor a read-only
# Apptainer image can write.
ENV PT_HPU_LAZY_MODE=1 \
    HABANA_LOGS=/tmp/habana_logs

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
COPY ${WHEELHOUSE}/ /tmp/wheelhouse/
RUN ${PYTHON} -m pip install --find-links /tmp/wheelhouse ${PIP_EXTRA_ARGS} \
        -r /tmp/requirements.txt -r /tmp/framework-requirements.txt
COPY pyproject.toml README.md /src/
COPY workflow/ /src/workflow/
RUN ${PYTHON} -m pip install --no-deps --find-links /tmp/wheelhouse ${PIP_EXTRA_ARGS} /src \
    && rm -rf /tmp/wheelhouse /tmp/requirements.txt /tmp/framework-requirements.txt /src \
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
