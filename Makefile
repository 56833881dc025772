# Two commands set up a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
CORES ?= 8
# pytest processes (pytest-xdist, a test file per process at a time; tests/conftest.py): `make test TEST_WORKERS=1`
TEST_WORKERS ?= 2
TARGET ?= results/unet2d/fold0
export PATH := $(BIN):$(PATH)

.PHONY: run test test-tf215 lint format bench clean venv venv-tf215 wheelhouse image

$(VENV)/.installed: requirements/*.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch and tensorflow-cpu are pinned in requirements/cpu.txt: an unpinned torch pulls
	# the CUDA build. tf-keras names `tensorflow` (the full build): no deps for it.
	$(BIN)/python -m pip install --quiet -r requirements/dev.txt
	$(BIN)/python -m pip install --quiet --no-deps -r requirements/tf-keras.txt
	$(BIN)/python -m pip install --quiet --no-deps -e . --config-settings editable_mode=compat
	touch $@

venv: $(VENV)/.installed

# TensorFlow 2.15 (Habana's last TF release; Keras 2 as tf.keras) beside the main venv's 2.21.
VENV_TF215 := .venv-tf215
$(VENV_TF215)/.installed: requirements/tf215.txt requirements/core-tf215.txt requirements/tensorflow.txt pyproject.toml
	$(PYTHON) -m venv $(VENV_TF215)
	$(VENV_TF215)/bin/python -m pip install --quiet --upgrade pip
	$(VENV_TF215)/bin/python -m pip install --quiet -r requirements/tf215.txt
	$(VENV_TF215)/bin/python -m pip install --quiet --no-deps -e . --config-settings editable_mode=compat
	touch $@

venv-tf215: $(VENV_TF215)/.installed

run: venv
	$(BIN)/snakemake --cores $(CORES) $(TARGET)

test: venv
	$(BIN)/ruff check .
	$(BIN)/snakefmt --check Snakefile rules/
	$(BIN)/snakemake --lint
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile
	$(MAKE) test-tf215

# The TensorFlow tests (modules marked `pytestmark = pytest.mark.tensorflow`) under TF 2.15.
TF_TESTS = $(shell grep -rl '^pytestmark = pytest.mark.tensorflow' tests)
test-tf215: venv-tf215
	$(VENV_TF215)/bin/python -m pytest -q -p no:cacheprovider $(TF_TESTS)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/snakefmt --check Snakefile rules/
	$(BIN)/snakemake --lint

format: venv
	$(BIN)/ruff format workflow tests benchmarks scripts
	$(BIN)/snakefmt Snakefile rules/

# Wheels for offline image builds (containers.offline: true, air-gapped sites, CI).
wheelhouse: venv
	mkdir -p docker/wheelhouse
	$(BIN)/python -m pip download --quiet --dest docker/wheelhouse \
		-r requirements/core.txt -r requirements/torch.txt -r requirements/torch-cpu.txt \
		-r requirements/tensorflow.txt -r requirements/tensorflow-cpu.txt -r requirements/cuda.txt \
		"setuptools>=77" wheel
	$(BIN)/python -m pip download --quiet --no-deps --dest docker/wheelhouse -r requirements/tf-keras.txt

# The backend's image through the Docker Engine API (DOCKER_HOST), e.g. BACKEND=cpu.
BACKEND ?= cpu
image: venv
	$(BIN)/accelpipe images build --backend $(BACKEND) $(IMAGE_ARGS)

bench: venv
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf work results logs .snakemake
