# Two commands set up a fresh machine: `make run` and `make test`.
PYTHON ?= python3
# Python 3.10, the vendor images' interpreter (ROCm, Gaudi): the venvs that mirror those images.
# pyenv's 3.10 when it has one (its python3.10 shim fails unless 3.10 is selected).
PYTHON310 ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.10*/bin/python3.10) python3.10)
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
# Snakemake's --cores: the cores this process may run on (nproc follows the CPU affinity, a
# cgroup's cpuset, taskset; not OMP_NUM_THREADS, which a shell may have set for one process);
# `make run CORES=4` for fewer.
CORES ?= $(shell env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc 2>/dev/null || getconf _NPROCESSORS_ONLN)
# pytest processes (pytest-xdist, a test file per process at a time; tests/conftest.py): `make test TEST_WORKERS=1`.
# Three on two cores: the end-to-end tests wait on Snakemake's job polling, Slurm, Podman and
# single-threaded stages (two processes left the machine ~17% idle; three keep it ~96% busy).
TEST_WORKERS ?= 3
# Each suite's JUnit report: `python scripts/test_durations.py .test-reports/main.xml` refreshes
# the seconds per test file that the scheduler starts the longest first by (tests/durations.json).
REPORTS := .test-reports
TARGET ?= results/unet2d/fold0
export PATH := $(BIN):$(PATH)

.PHONY: run test test-tf215 test-tf217 test-torch26 lint format docs bench clean venv venv-tf215 venv-tf217 venv-torch26 wheelhouse image accelerator-check

$(VENV)/.installed: requirements/*.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch and tensorflow-cpu are pinned in requirements/cpu.txt: an unpinned torch pulls
	# the CUDA build. tf-keras names `tensorflow` (the full build), HTA jupyterlab: no deps for them.
	$(BIN)/python -m pip install --quiet -r requirements/dev.txt
	$(BIN)/python -m pip install --quiet --no-deps -r requirements/tf-keras.txt -r requirements/hta.txt
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

# TensorFlow 2.17 on Python 3.10, the rocm-tensorflow image's release: numpy 1.x, Keras 2 from
# tf-keras 2.17 (--no-deps, as the main venv's tf-keras.txt).
VENV_TF217 := .venv-tf217
$(VENV_TF217)/.installed: requirements/tf217.txt requirements/tf-keras-217.txt requirements/core-tf215.txt requirements/tensorflow.txt pyproject.toml
	$(PYTHON310) -m venv $(VENV_TF217)
	$(VENV_TF217)/bin/python -m pip install --quiet --upgrade pip
	$(VENV_TF217)/bin/python -m pip install --quiet -r requirements/tf217.txt
	$(VENV_TF217)/bin/python -m pip install --quiet --no-deps -r requirements/tf-keras-217.txt
	$(VENV_TF217)/bin/python -m pip install --quiet --no-deps -e . --config-settings editable_mode=compat
	touch $@

venv-tf217: $(VENV_TF217)/.installed

# torch 2.6 on Python 3.10, the rocm-pytorch and gaudi-pytorch images' release, beside the main
# venv's 2.13 on 3.11. PyPI's torch 2.6.0 is its CUDA build (~5 GB with its nvidia wheels); it
# runs on the CPU.
VENV_TORCH26 := .venv-torch26
$(VENV_TORCH26)/.installed: requirements/torch26.txt requirements/core-py310.txt requirements/torch.txt pyproject.toml
	$(PYTHON310) -m venv $(VENV_TORCH26)
	$(VENV_TORCH26)/bin/python -m pip install --quiet --upgrade pip
	$(VENV_TORCH26)/bin/python -m pip install --quiet -r requirements/torch26.txt
	$(VENV_TORCH26)/bin/python -m pip install --quiet --no-deps -e . --config-settings editable_mode=compat
	touch $@

venv-torch26: $(VENV_TORCH26)/.installed

run: venv
	$(BIN)/snakemake --cores $(CORES) $(TARGET)

# Each phase prints its wall time and the time so far, the last line the total
# (scripts/timed.sh); a failing phase still stops `make test` with its status.
test: TEST_START := $(shell date +%s%N)
test: TIMED = bash scripts/timed.sh $(TEST_START)
test: venv
	@$(TIMED) ruff $(BIN)/ruff check .
	@$(TIMED) mypy $(BIN)/mypy
	@$(TIMED) snakefmt $(BIN)/snakefmt --check Snakefile rules/
	@$(TIMED) snakemake-lint $(BIN)/snakemake --lint
	@$(TIMED) pytest $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --junitxml=$(REPORTS)/main.xml
	@$(TIMED) test-tf215 $(MAKE) test-tf215
	@$(TIMED) test-tf217 $(MAKE) test-tf217
	@$(TIMED) test-torch26 $(MAKE) test-torch26
	@$(TIMED) "make test"

# The TensorFlow tests (modules marked `pytestmark = pytest.mark.tensorflow`) under TF 2.15,
# less the long tests of accelpipe's own logic marked main_suite_only (the main suite runs them;
# their framework calls are made by the shorter tests here too). The same for test-tf217/-torch26.
TF_TESTS = $(shell grep -rl '^pytestmark = pytest.mark.tensorflow' tests)
test-tf215: venv-tf215
	$(VENV_TF215)/bin/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile \
		-m 'not main_suite_only' --junitxml=$(REPORTS)/tf215.xml $(TF_TESTS)

# The same tests under TF 2.17 / Python 3.10 (the rocm-tensorflow image's release).
test-tf217: venv-tf217
	$(VENV_TF217)/bin/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile \
		-m 'not main_suite_only' --junitxml=$(REPORTS)/tf217.xml $(TF_TESTS)

# The PyTorch tests (modules marked `pytestmark = pytest.mark.torch`) under torch 2.6 / Python 3.10.
TORCH_TESTS = $(shell grep -rl --include='*.py' '^pytestmark = pytest.mark.torch' tests)
test-torch26: venv-torch26
	$(VENV_TORCH26)/bin/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile \
		-m 'not main_suite_only' --junitxml=$(REPORTS)/torch26.xml $(TORCH_TESTS)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/snakefmt --check Snakefile rules/
	$(BIN)/snakemake --lint

format: venv
	$(BIN)/ruff format workflow tests benchmarks scripts
	$(BIN)/snakefmt Snakefile rules/

# docs/configuration.md from the config schema (tests/accelpipe/test_config_reference.py checks
# that the checked-in page is what this writes).
docs: venv
	$(BIN)/python -m accelpipe.config.schema_docs docs/configuration.md

# Wheels for offline image builds (containers.offline: true, air-gapped sites, CI). With
# PYTHON_VERSION (and FRAMEWORK: torch, tensorflow or both), also a wheelhouse per framework
# that installs accelpipe offline into an environment that already holds it, e.g.
# `make wheelhouse PYTHON_VERSION=3.12 FRAMEWORK=torch` -> wheelhouse/py3.12-torch/install.sh;
# CONSTRAINTS=<the node's pip list --format=freeze> resolves it against the node's packages.
FRAMEWORK ?= torch
# pip evaluates markers (python_version < "3.11") with the Python it runs on: the target's.
WHEELHOUSE_PYTHON ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/$(PYTHON_VERSION)*/bin/python$(PYTHON_VERSION)) python$(PYTHON_VERSION))
wheelhouse: venv
ifdef PYTHON_VERSION
	for framework in $(FRAMEWORK); do \
		PYTHON=$(WHEELHOUSE_PYTHON) CONSTRAINTS=$(CONSTRAINTS) \
			bash scripts/env-wheelhouse.sh $(PYTHON_VERSION) $$framework \
			wheelhouse/py$(PYTHON_VERSION)-$$framework || exit 1; \
	done
endif
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

# The first command on a new accelerator node (docs/containers-and-clusters.md), inside a time
# budget: `make accelerator-check BACKEND=cuda` -> accelerator-check/accelerator-check.{md,json}.
# CHECK_PYTHON: the Python that holds accelpipe (default .venv's, else $(PYTHON): a node's own
# environment after a wheelhouse install); CHECK_ARGS: more options (accelpipe accelerator-check -h).
CHECK_PYTHON ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))
CHECK_BUDGET_S ?= 480
CHECK_OUT ?= accelerator-check
accelerator-check:
	$(CHECK_PYTHON) -m accelpipe accelerator-check --backend $(BACKEND) \
		--budget-s $(CHECK_BUDGET_S) --out $(CHECK_OUT) $(CHECK_ARGS)

bench: venv
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf work results logs .snakemake
