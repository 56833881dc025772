# accelpipe's TensorFlow stages on CPU: a Debian Python with TensorFlow's CPU wheel, in a venv
# at /opt/accelpipe. Build context: the repository root (.dockerignore keeps it small). For
# offline or air-gapped builds put wheels in docker/wheelhouse/ and pass PIP_EXTRA_ARGS=--no-index.
ARG BASE_IMAGE=docker.io/library/python:3.11.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
ARG PIP_EXTRA_ARGS=""
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN python3 -m venv /opt/accelpipe
COPY requirements/core.txt requirements/tensorflow.txt requirements/tensorflow-cpu.txt \
     requirements/tf-keras.txt /tmp/requirements/
COPY docker/wheelhouse/ /tmp/wheelhouse/
# tf-keras without its dependencies: it names `tensorflow`, the full build, not tensorflow-cpu.
RUN /opt/accelpipe/bin/pip install --find-links /tmp/wheelhouse ${PIP_EXTRA_ARGS} \
        -r /tmp/requirements/core.txt -r /tmp/requirements/tensorflow.txt \
        -r /tmp/requirements/tensorflow-cpu.txt \
    && /opt/accelpipe/bin/pip install --no-deps --find-links /tmp/wheelhouse ${PIP_EXTRA_ARGS} \
        -r /tmp/requirements/tf-keras.txt
# The package becomes a wheel, installed in the runtime stage, so that /opt/accelpipe (the
# big dependency layer) stays byte-identical and cached when only the package changes.
COPY pyproject.toml README.md /src/
COPY workflow/ /src/workflow/
RUN /opt/accelpipe/bin/pip wheel --no-deps --find-links /tmp/wheelhouse ${PIP_EXTRA_ARGS} \
        --wheel-dir /tmp/dist /src

# The runtime stage: no wheelhouse, no build tools, a non-root default user.
FROM ${BASE_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    VIRTUAL_ENV=/opt/accelpipe \
    PATH=/opt/accelpipe/bin:$PATH \
    MPLCONFIGDIR=/tmp/matplotlib \
    TF_CPP_MIN_LOG_LEVEL=1
RUN useradd --create-home --uid 1000 --user-group accelpipe
COPY --from=build /opt/accelpipe /opt/accelpipe
COPY --from=build /tmp/dist/ /tmp/dist/
RUN pip install --no-deps --no-index --no-cache-dir /tmp/dist/*.whl && rm -rf /tmp/dist
USER accelpipe
WORKDIR /home/accelpipe
CMD ["accelpipe", "--help"]
