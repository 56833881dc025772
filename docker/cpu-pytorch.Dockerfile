# accelpipe on CPU: a Debian Python with PyTorch's CPU wheel, in a venv at /opt/accelpipe.
# Build context: the repository root (.dockerignore keeps it small). For offline or
# air-gapped builds put wheels in docker/wheelhouse/ and pass PIP_EXTRA_ARGS=--no-index.
ARG BASE_IMAGE=docker.io/library/python:3.11.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
ARG PIP_EXTRA_ARGS=""
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN python3 -m venv /opt/accelpipe
COPY requirements/core.txt requirements/torch-cpu.txt /tmp/requirements/
COPY docker/wheelhouse/ /tmp/wheelhouse/
RUN /opt/accelpipe/bin/pip install --find-links /tmp/wheelhouse ${PIP_EXTRA_ARGS} \
        -r /tmp/requirements/core.txt -r /tmp/requirements/torch-cpu.txt
COPY pyproject.toml README.md /src/
COPY workflow/ /src/workflow/
RUN /opt/accelpipe/bin/pip install --no-deps --find-links /tmp/wheelhouse ${PIP_EXTRA_ARGS} /src

# The runtime stage: no wheelhouse, no build tools, a non-root default user.
FROM ${BASE_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    VIRTUAL_ENV=/opt/accelpipe \
    PATH=/opt/accelpipe/bin:$PATH \
    MPLCONFIGDIR=/tmp/matplotlib
COPY --from=build /opt/accelpipe /opt/accelpipe
RUN useradd --create-home --uid 1000 --user-group accelpipe
USER accelpipe
WORKDIR /home/accelpipe
CMD ["accelpipe", "--help"]
