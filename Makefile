# Two commands set up a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
CORES ?= 8
TARGET ?= results/unet2d/fold0
export PATH := $(BIN):$(PATH)

.PHONY: run test lint format bench clean venv wheelhouse image

$(VENV)/.installed: requirements/cpu.txt requirements/dev.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch is pinned in requirements/cpu.txt: an unpinned torch pulls the CUDA build.
	$(BIN)/python -m pip install --quiet -r requirements/dev.txt
	$(BIN)/python -m pip install --quiet --no-deps -e . --config-settings editable_mode=compat
	touch $@

venv: $(VENV)/.installed

run: venv
	$(BIN)/snakemake --cores $(CORES) $(TARGET)

test: venv
	$(BIN)/ruff check .
	$(BIN)/snakefmt --check Snakefile rules/
	$(BIN)/snakemake --lint
	$(BIN)/python -m pytest -q

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
		-r requirements/core.txt -r requirements/torch-cpu.txt "setuptools>=77" wheel

# The backend's image through the Docker Engine API (DOCKER_HOST), e.g. BACKEND=cpu.
BACKEND ?= cpu
image: venv
	$(BIN)/accelpipe images build --backend $(BACKEND) $(IMAGE_ARGS)

bench: venv
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf work results logs .snakemake
